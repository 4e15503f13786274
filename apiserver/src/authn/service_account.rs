//! ServiceAccount tokens: JWTs signed with the cluster's service-account
//! key (ES256), as the TokenRequest API (`serviceaccounts/token`, `kubectl
//! create token`) issues them. A token names its account (and the pod it
//! is bound to, if any), its audiences and its expiry; it authenticates as
//! `system:serviceaccount:NAMESPACE:NAME` in the groups
//! `system:serviceaccounts` and `system:serviceaccounts:NAMESPACE` while it
//! has not expired and its account (and pod) still exist with the uid it
//! was issued for.

use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use base64::Engine;
use ring::rand::SystemRandom;
use ring::signature::{
    EcdsaKeyPair, KeyPair, UnparsedPublicKey, ECDSA_P256_SHA256_FIXED,
    ECDSA_P256_SHA256_FIXED_SIGNING,
};
use serde_json::{json, Value};

use crate::user::UserInfo;

/// The issuer (`iss`) of the tokens, and their default audience, as
/// kube-apiserver's usual `--service-account-issuer`.
pub const ISSUER: &str = "https://kubernetes.default.svc.cluster.local";
/// The group of every ServiceAccount.
pub const SERVICE_ACCOUNTS: &str = "system:serviceaccounts";
/// Clocks may differ this much (seconds) between issuer and reader.
const LEEWAY: i64 = 60;

/// The audiences a TokenRequest or TokenReview `spec` names, or the API
/// server's own when it names none.
pub fn audiences_of(spec: &Value) -> Vec<String> {
    spec["audiences"]
        .as_array()
        .map(|a| {
            a.iter()
                .filter_map(|v| v.as_str().map(String::from))
                .collect()
        })
        .filter(|a: &Vec<String>| !a.is_empty())
        .unwrap_or_else(|| vec![ISSUER.to_string()])
}

/// What a token says.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Claims {
    pub namespace: String,
    pub account: String,
    pub account_uid: String,
    pub audiences: Vec<String>,
    /// Unix seconds.
    pub issued_at: i64,
    pub expires_at: i64,
    /// The pod the token is bound to: (name, uid).
    pub pod: Option<(String, String)>,
}

impl Claims {
    /// The user the token authenticates as.
    pub fn user(&self) -> UserInfo {
        UserInfo {
            name: format!("system:serviceaccount:{}:{}", self.namespace, self.account),
            groups: vec![
                SERVICE_ACCOUNTS.into(),
                format!("{SERVICE_ACCOUNTS}:{}", self.namespace),
            ],
        }
    }
}

/// Signs and verifies tokens with one P-256 key.
pub struct TokenIssuer {
    key: EcdsaKeyPair,
    public: Vec<u8>,
    key_id: String,
    rng: SystemRandom,
}

impl std::fmt::Debug for TokenIssuer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TokenIssuer")
            .field("key_id", &self.key_id)
            .finish()
    }
}

fn encode(value: &Value) -> String {
    URL_SAFE_NO_PAD.encode(serde_json::to_vec(value).unwrap_or_default())
}

fn decode(part: &str) -> Result<Value, String> {
    let bytes = URL_SAFE_NO_PAD
        .decode(part)
        .map_err(|_| "not base64url".to_string())?;
    serde_json::from_slice(&bytes).map_err(|_| "not JSON".to_string())
}

impl TokenIssuer {
    /// The issuer of a PKCS#8 P-256 private key.
    pub fn from_pkcs8(der: &[u8]) -> Result<TokenIssuer, String> {
        let rng = SystemRandom::new();
        let key = EcdsaKeyPair::from_pkcs8(&ECDSA_P256_SHA256_FIXED_SIGNING, der, &rng)
            .map_err(|e| format!("the service-account key is not a P-256 PKCS#8 key: {e}"))?;
        let public = key.public_key().as_ref().to_vec();
        let digest = ring::digest::digest(&ring::digest::SHA256, &public);
        Ok(TokenIssuer {
            key,
            key_id: URL_SAFE_NO_PAD.encode(digest.as_ref()),
            public,
            rng,
        })
    }

    /// The signed token for `claims`.
    pub fn sign(&self, claims: &Claims) -> Result<String, String> {
        let header = json!({"alg": "ES256", "kid": self.key_id});
        let mut kubernetes = json!({
            "namespace": claims.namespace,
            "serviceaccount": {"name": claims.account, "uid": claims.account_uid},
        });
        if let Some((name, uid)) = &claims.pod {
            kubernetes["pod"] = json!({"name": name, "uid": uid});
        }
        let payload = json!({
            "iss": ISSUER,
            "sub": format!("system:serviceaccount:{}:{}", claims.namespace, claims.account),
            "aud": claims.audiences,
            "iat": claims.issued_at,
            "nbf": claims.issued_at,
            "exp": claims.expires_at,
            "kubernetes.io": kubernetes,
        });
        let signed = format!("{}.{}", encode(&header), encode(&payload));
        let signature = self
            .key
            .sign(&self.rng, signed.as_bytes())
            .map_err(|_| "signing the token failed".to_string())?;
        Ok(format!(
            "{signed}.{}",
            URL_SAFE_NO_PAD.encode(signature.as_ref())
        ))
    }

    /// Whether `token` looks like one of ours (a JWT), before verifying.
    pub fn is_jwt(token: &str) -> bool {
        token.split('.').count() == 3 && token.starts_with("eyJ")
    }

    /// The claims of `token` if this key signed it, it is for one of
    /// `audiences`, and it is valid at `now` (Unix seconds).
    pub fn verify(&self, token: &str, audiences: &[&str], now: i64) -> Result<Claims, String> {
        let mut parts = token.split('.');
        let (Some(header), Some(payload), Some(signature), None) =
            (parts.next(), parts.next(), parts.next(), parts.next())
        else {
            return Err("not a JWT".into());
        };
        let head = decode(header)?;
        if head["alg"] != "ES256" {
            return Err(format!("unexpected algorithm {}", head["alg"]));
        }
        let signature = URL_SAFE_NO_PAD
            .decode(signature)
            .map_err(|_| "the signature is not base64url".to_string())?;
        let signed = &token[..header.len() + 1 + payload.len()];
        UnparsedPublicKey::new(&ECDSA_P256_SHA256_FIXED, &self.public)
            .verify(signed.as_bytes(), &signature)
            .map_err(|_| "the signature is not the cluster's".to_string())?;
        let claims = decode(payload)?;
        if claims["iss"] != ISSUER {
            return Err("another issuer".into());
        }
        let number = |field: &str| claims[field].as_i64().ok_or(format!("no {field}"));
        let expires_at = number("exp")?;
        if now > expires_at + LEEWAY {
            return Err("the token has expired".into());
        }
        if let Ok(not_before) = number("nbf") {
            if now + LEEWAY < not_before {
                return Err("the token is not valid yet".into());
            }
        }
        let token_audiences: Vec<String> = match &claims["aud"] {
            Value::String(one) => vec![one.clone()],
            Value::Array(many) => many
                .iter()
                .filter_map(|a| a.as_str().map(String::from))
                .collect(),
            _ => Vec::new(),
        };
        if !token_audiences
            .iter()
            .any(|a| audiences.contains(&a.as_str()))
        {
            return Err("the token is for another audience".into());
        }
        let k8s = &claims["kubernetes.io"];
        let text = |v: &Value| v.as_str().unwrap_or("").to_string();
        let pod = k8s
            .get("pod")
            .map(|pod| (text(&pod["name"]), text(&pod["uid"])));
        let claims = Claims {
            namespace: text(&k8s["namespace"]),
            account: text(&k8s["serviceaccount"]["name"]),
            account_uid: text(&k8s["serviceaccount"]["uid"]),
            audiences: token_audiences,
            issued_at: number("iat").unwrap_or(0),
            expires_at,
            pod,
        };
        if claims.namespace.is_empty() || claims.account.is_empty() {
            return Err("the token names no service account".into());
        }
        Ok(claims)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn issuer() -> TokenIssuer {
        let rng = SystemRandom::new();
        let pkcs8 = EcdsaKeyPair::generate_pkcs8(&ECDSA_P256_SHA256_FIXED_SIGNING, &rng).unwrap();
        TokenIssuer::from_pkcs8(pkcs8.as_ref()).unwrap()
    }

    fn claims() -> Claims {
        Claims {
            namespace: "team".into(),
            account: "bot".into(),
            account_uid: "u-1".into(),
            audiences: vec![ISSUER.into()],
            issued_at: 1_000,
            expires_at: 4_600,
            pod: Some(("web".into(), "p-1".into())),
        }
    }

    #[test]
    fn a_signed_token_reads_back_until_it_expires() {
        let issuer = issuer();
        let token = issuer.sign(&claims()).unwrap();
        assert!(TokenIssuer::is_jwt(&token));
        assert_eq!(issuer.verify(&token, &[ISSUER], 2_000).unwrap(), claims());
        assert_eq!(claims().user().name, "system:serviceaccount:team:bot");
        assert_eq!(
            claims().user().groups,
            ["system:serviceaccounts", "system:serviceaccounts:team"]
        );
        // Expired (past the leeway), not yet valid, another audience.
        assert!(issuer
            .verify(&token, &[ISSUER], 4_600 + LEEWAY + 1)
            .unwrap_err()
            .contains("expired"));
        assert!(issuer
            .verify(&token, &[ISSUER], 1_000 - LEEWAY - 1)
            .is_err());
        assert!(issuer
            .verify(&token, &["vault"], 2_000)
            .unwrap_err()
            .contains("audience"));
    }

    #[test]
    fn a_token_of_another_key_or_altered_is_refused() {
        let token = issuer().sign(&claims()).unwrap();
        assert!(issuer().verify(&token, &[ISSUER], 2_000).is_err());
        let issuer = issuer();
        let token = issuer.sign(&claims()).unwrap();
        let mut parts: Vec<&str> = token.split('.').collect();
        let mut forged = claims();
        forged.account = "admin".into();
        let other = issuer.sign(&forged).unwrap();
        let other_payload = other.split('.').nth(1).unwrap().to_string();
        parts[1] = &other_payload;
        assert!(issuer.verify(&parts.join("."), &[ISSUER], 2_000).is_err());
        assert!(issuer.verify("a.b", &[ISSUER], 2_000).is_err());
    }
}
