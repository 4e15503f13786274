//! Static bearer tokens, as kube-apiserver's `--token-auth-file`: a CSV
//! file of `token,user,uid[,"group1,group2"]` lines.

use std::collections::HashMap;

use crate::user::UserInfo;

#[derive(Debug, Clone, Default)]
pub struct TokenFile {
    users: HashMap<String, UserInfo>,
}

impl TokenFile {
    /// Reads the file's text; the error names the line that is wrong.
    pub fn parse(text: &str) -> Result<TokenFile, String> {
        let mut users = HashMap::new();
        for (index, line) in text.lines().enumerate() {
            let line = line.trim();
            if line.is_empty() || line.starts_with('#') {
                continue;
            }
            let fields = csv_fields(line).map_err(|e| format!("line {}: {e}", index + 1))?;
            if fields.len() < 3 {
                return Err(format!(
                    "line {}: want token,user,uid[,\"group1,group2\"]; found {} field(s)",
                    index + 1,
                    fields.len()
                ));
            }
            if fields[0].is_empty() || fields[1].is_empty() {
                return Err(format!(
                    "line {}: the token and the user must not be empty",
                    index + 1
                ));
            }
            let groups = fields
                .get(3)
                .map(|g| {
                    g.split(',')
                        .map(str::trim)
                        .filter(|g| !g.is_empty())
                        .map(String::from)
                        .collect()
                })
                .unwrap_or_default();
            let user = UserInfo {
                name: fields[1].clone(),
                groups,
            };
            if users.insert(fields[0].clone(), user).is_some() {
                return Err(format!("line {}: the token is given twice", index + 1));
            }
        }
        Ok(TokenFile { users })
    }

    /// The user of `token`, if it is one of the file's.
    pub fn user(&self, token: &str) -> Option<&UserInfo> {
        self.users.get(token)
    }

    pub fn len(&self) -> usize {
        self.users.len()
    }

    pub fn is_empty(&self) -> bool {
        self.users.is_empty()
    }
}

/// The fields of one CSV line; a field in double quotes may hold commas
/// and `""` for a quote.
fn csv_fields(line: &str) -> Result<Vec<String>, String> {
    let mut fields = Vec::new();
    let mut chars = line.chars().peekable();
    loop {
        let mut field = String::new();
        if chars.peek() == Some(&'"') {
            chars.next();
            loop {
                match chars.next() {
                    Some('"') if chars.peek() == Some(&'"') => {
                        chars.next();
                        field.push('"');
                    }
                    Some('"') => break,
                    Some(c) => field.push(c),
                    None => return Err("a quoted field is not closed".into()),
                }
            }
            match chars.next() {
                None => {
                    fields.push(field);
                    return Ok(fields);
                }
                Some(',') => fields.push(field),
                Some(c) => return Err(format!("{c:?} after a quoted field")),
            }
        } else {
            loop {
                match chars.next() {
                    Some(',') => break,
                    Some(c) => field.push(c),
                    None => {
                        fields.push(field.trim().to_string());
                        return Ok(fields);
                    }
                }
            }
            fields.push(field.trim().to_string());
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lines_give_users_and_their_groups() {
        let file =
            TokenFile::parse("# tokens\nt1,alice,1\nt2,bob,2,\"dev,ops\"\n\nt3,carol,3,viewers\n")
                .unwrap();
        assert_eq!(file.len(), 3);
        assert_eq!(file.user("t1").unwrap().name, "alice");
        assert!(file.user("t1").unwrap().groups.is_empty());
        assert_eq!(file.user("t2").unwrap().groups, ["dev", "ops"]);
        assert_eq!(file.user("t3").unwrap().groups, ["viewers"]);
        assert!(file.user("t4").is_none());
    }

    #[test]
    fn a_bad_line_is_named() {
        assert!(TokenFile::parse("t1,alice\n")
            .unwrap_err()
            .contains("line 1"));
        assert!(TokenFile::parse("ok,a,1\nt,b,2,\"open\n")
            .unwrap_err()
            .contains("line 2"));
        assert!(TokenFile::parse("t,a,1\nt,b,2\n")
            .unwrap_err()
            .contains("twice"));
        assert!(TokenFile::parse(",a,1\n").is_err());
    }
}
