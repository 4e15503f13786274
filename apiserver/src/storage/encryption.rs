//! Encryption at rest, configured as kube-apiserver's
//! `--encryption-provider-config`: an `EncryptionConfiguration` names
//! resources and, for each, a list of providers. The first provider writes;
//! every provider may read what it wrote. `aesgcm` seals a value with
//! AES-GCM under the first of its keys, stored as
//! `k8s:enc:aesgcm:v1:<key name>:<12-byte nonce><ciphertext and tag>` with
//! the store key as authenticated data (a value moved to another key does
//! not decrypt); `identity` reads and writes plaintext, so that objects
//! written before encryption was turned on stay readable and are encrypted
//! on their next update.

use std::path::Path;
use std::sync::Arc;

use base64::Engine;
use ring::aead::{Aad, LessSafeKey, Nonce, UnboundKey, AES_128_GCM, AES_256_GCM, NONCE_LEN};
use ring::rand::{SecureRandom, SystemRandom};
use serde::Deserialize;

use super::StorageError;

/// The prefix of every encrypted value.
const ENCRYPTED: &[u8] = b"k8s:enc:";

/// Which values are encrypted, and how.
pub struct Encryption {
    rules: Vec<Rule>,
    random: SystemRandom,
}

/// Names what is encrypted, never the keys.
impl std::fmt::Debug for Encryption {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let prefixes: Vec<&str> = self
            .rules
            .iter()
            .flat_map(|r| r.prefixes.iter().map(String::as_str))
            .collect();
        f.debug_struct("Encryption")
            .field("resources", &prefixes)
            .finish()
    }
}

struct Rule {
    /// Store prefixes of the resources, e.g. `/registry/core/secrets/`.
    prefixes: Vec<String>,
    providers: Vec<Provider>,
}

enum Provider {
    AesGcm(Vec<NamedKey>),
    Identity,
}

struct NamedKey {
    name: String,
    key: LessSafeKey,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct ConfigFile {
    api_version: String,
    kind: String,
    #[serde(default)]
    resources: Vec<ResourceConfig>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct ResourceConfig {
    resources: Vec<String>,
    providers: Vec<serde_yaml::Mapping>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct AesGcmConfig {
    keys: Vec<KeyConfig>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct KeyConfig {
    name: String,
    secret: String,
}

impl Encryption {
    /// Reads an `EncryptionConfiguration` file.
    pub fn from_file(path: &Path) -> Result<Arc<Encryption>, String> {
        let text = std::fs::read_to_string(path)
            .map_err(|e| format!("reading {}: {e}", path.display()))?;
        Encryption::parse(&text)
            .map(Arc::new)
            .map_err(|e| format!("{}: {e}", path.display()))
    }

    pub fn parse(text: &str) -> Result<Encryption, String> {
        let file: ConfigFile = serde_yaml::from_str(text)
            .map_err(|e| format!("not an EncryptionConfiguration: {e}"))?;
        if file.kind != "EncryptionConfiguration"
            || file.api_version != "apiserver.config.k8s.io/v1"
        {
            return Err(format!(
                "kind {} of {} given; expected EncryptionConfiguration of apiserver.config.k8s.io/v1",
                file.kind, file.api_version
            ));
        }
        let mut rules = Vec::new();
        for (i, resource) in file.resources.iter().enumerate() {
            let prefixes = resource
                .resources
                .iter()
                .map(|name| storage_prefix(name))
                .collect::<Result<Vec<_>, _>>()?;
            if resource.providers.is_empty() {
                return Err(format!("resources[{i}] has no providers"));
            }
            let providers = resource
                .providers
                .iter()
                .map(|p| provider(p).map_err(|e| format!("resources[{i}].providers: {e}")))
                .collect::<Result<Vec<_>, _>>()?;
            rules.push(Rule {
                prefixes,
                providers,
            });
        }
        Ok(Encryption {
            rules,
            random: SystemRandom::new(),
        })
    }

    /// A configuration that encrypts Secrets with one new random AES-256
    /// key and still reads plaintext ones, as YAML.
    pub fn generate_config() -> Result<String, String> {
        let mut key = [0u8; 32];
        SystemRandom::new()
            .fill(&mut key)
            .map_err(|_| "no random numbers for a key".to_string())?;
        let secret = base64::engine::general_purpose::STANDARD.encode(key);
        Ok(format!(
            "apiVersion: apiserver.config.k8s.io/v1\n\
             kind: EncryptionConfiguration\n\
             resources:\n\
             - resources:\n  \
               - secrets\n  \
               providers:\n  \
               - aesgcm:\n      \
                   keys:\n      \
                   - name: key1\n        \
                     secret: {secret}\n  \
               - identity: {{}}\n"
        ))
    }

    fn rule(&self, key: &str) -> Option<&Rule> {
        self.rules
            .iter()
            .find(|rule| rule.prefixes.iter().any(|p| key.starts_with(p.as_str())))
    }

    /// `value` as stored at `key`: sealed by the first provider of the
    /// key's resource, or as it is.
    pub fn encrypt(&self, key: &str, value: Vec<u8>) -> Result<Vec<u8>, StorageError> {
        let Some(rule) = self.rule(key) else {
            return Ok(value);
        };
        match &rule.providers[0] {
            Provider::Identity => Ok(value),
            Provider::AesGcm(keys) => {
                let named = &keys[0];
                let mut nonce = [0u8; NONCE_LEN];
                self.random
                    .fill(&mut nonce)
                    .map_err(|_| StorageError::Internal("no random nonce".into()))?;
                let mut sealed = value;
                named
                    .key
                    .seal_in_place_append_tag(
                        Nonce::assume_unique_for_key(nonce),
                        Aad::from(key.as_bytes()),
                        &mut sealed,
                    )
                    .map_err(|_| StorageError::Internal("encrypting failed".into()))?;
                let mut out = format!("k8s:enc:aesgcm:v1:{}:", named.name).into_bytes();
                out.reserve(NONCE_LEN + sealed.len());
                out.extend_from_slice(&nonce);
                out.extend_from_slice(&sealed);
                Ok(out)
            }
        }
    }

    /// The plaintext of `value` as stored at `key`.
    pub fn decrypt(&self, key: &str, value: bytes::Bytes) -> Result<bytes::Bytes, StorageError> {
        let Some(rule) = self.rule(key) else {
            return Ok(value);
        };
        let failed = |why: &str| StorageError::Internal(format!("cannot decrypt {key}: {why}"));
        let Some(rest) = value.strip_prefix(ENCRYPTED) else {
            return match rule
                .providers
                .iter()
                .any(|p| matches!(p, Provider::Identity))
            {
                true => Ok(value),
                false => Err(failed(
                    "it is not encrypted and no identity provider is configured",
                )),
            };
        };
        let Some(rest) = rest.strip_prefix(b"aesgcm:v1:".as_slice()) else {
            return Err(failed("encrypted by a provider that is not configured"));
        };
        let Some(colon) = rest.iter().position(|b| *b == b':') else {
            return Err(failed("no key name"));
        };
        let (name, sealed) = (&rest[..colon], &rest[colon + 1..]);
        let key_of = rule.providers.iter().find_map(|p| match p {
            Provider::AesGcm(keys) => keys.iter().find(|k| k.name.as_bytes() == name),
            Provider::Identity => None,
        });
        let Some(named) = key_of else {
            return Err(failed(&format!(
                "key {:?} is not in the configuration",
                String::from_utf8_lossy(name)
            )));
        };
        if sealed.len() < NONCE_LEN {
            return Err(failed("too short"));
        }
        let nonce = Nonce::try_assume_unique_for_key(&sealed[..NONCE_LEN])
            .map_err(|_| failed("bad nonce"))?;
        let mut buffer = sealed[NONCE_LEN..].to_vec();
        let plain = named
            .key
            .open_in_place(nonce, Aad::from(key.as_bytes()), &mut buffer)
            .map_err(|_| failed("authentication failed (wrong key or altered value)"))?;
        let length = plain.len();
        buffer.truncate(length);
        Ok(bytes::Bytes::from(buffer))
    }
}

/// `secrets` or `deployments.apps` as the store prefix of the resource.
fn storage_prefix(name: &str) -> Result<String, String> {
    let (plural, group) = name.split_once('.').unwrap_or((name, ""));
    crate::resources::all()
        .iter()
        .find(|r| r.plural == plural && r.group == group)
        .map(|r| r.storage_prefix())
        .ok_or_else(|| format!("unknown resource {name:?} (write secrets or deployments.apps)"))
}

fn provider(config: &serde_yaml::Mapping) -> Result<Provider, String> {
    if config.len() != 1 {
        return Err("each provider names exactly one of aesgcm or identity".into());
    }
    let (name, value) = config.iter().next().expect("one entry");
    match name.as_str() {
        Some("identity") => Ok(Provider::Identity),
        Some("aesgcm") => {
            let aes: AesGcmConfig =
                serde_yaml::from_value(value.clone()).map_err(|e| format!("aesgcm: {e}"))?;
            if aes.keys.is_empty() {
                return Err("aesgcm has no keys".into());
            }
            let keys = aes
                .keys
                .iter()
                .map(|k| {
                    let bytes = base64::engine::general_purpose::STANDARD
                        .decode(k.secret.trim())
                        .map_err(|e| format!("aesgcm key {:?}: not base64: {e}", k.name))?;
                    let algorithm = match bytes.len() {
                        16 => &AES_128_GCM,
                        32 => &AES_256_GCM,
                        n => {
                            return Err(format!(
                                "aesgcm key {:?} is {n} bytes; use 16 or 32",
                                k.name
                            ))
                        }
                    };
                    if k.name.is_empty() || k.name.contains(':') {
                        return Err(format!(
                            "aesgcm key name {:?} is empty or has a colon",
                            k.name
                        ));
                    }
                    let unbound = UnboundKey::new(algorithm, &bytes)
                        .map_err(|_| format!("aesgcm key {:?} is not usable", k.name))?;
                    Ok(NamedKey {
                        name: k.name.clone(),
                        key: LessSafeKey::new(unbound),
                    })
                })
                .collect::<Result<Vec<_>, _>>()?;
            Ok(Provider::AesGcm(keys))
        }
        Some(other @ ("aescbc" | "secretbox" | "kms")) => Err(format!(
            "provider {other} is not supported here; use aesgcm (or identity)"
        )),
        _ => Err(format!("unknown provider {name:?}")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const SECRET: &str = "/registry/core/secrets/default/s";

    fn config(providers: &str) -> String {
        format!(
            "apiVersion: apiserver.config.k8s.io/v1\nkind: EncryptionConfiguration\nresources:\n- resources: [secrets]\n  providers:\n{providers}"
        )
    }

    const KEY1: &str = "    - aesgcm:\n        keys:\n        - name: key1\n          secret: YW4gZXhhbXBsZSBrZXkgb2YgMzIgYnl0ZXMsIG9rISE=\n";
    const KEY2: &str = "    - aesgcm:\n        keys:\n        - name: key2\n          secret: YSBzZWNvbmQgMTZCIGtleQ==\n";

    #[test]
    fn secrets_are_sealed_and_open_again_other_resources_are_not() {
        let e = Encryption::parse(&config(&format!("{KEY1}    - identity: {{}}\n"))).unwrap();
        let plain = br#"{"data":{"password":"aHVudGVyMg=="}}"#.to_vec();
        let stored = e.encrypt(SECRET, plain.clone()).unwrap();
        assert!(stored.starts_with(b"k8s:enc:aesgcm:v1:key1:"));
        assert!(!stored.windows(8).any(|w| w == b"aHVudGVy"));
        assert_eq!(e.decrypt(SECRET, stored.clone().into()).unwrap(), plain);
        // Two writes of one value differ (a fresh nonce each).
        assert_ne!(e.encrypt(SECRET, plain.clone()).unwrap(), stored);
        // Moved to another key, it does not open.
        let err = e
            .decrypt("/registry/core/secrets/default/t", stored.into())
            .unwrap_err();
        assert!(err.to_string().contains("authentication failed"), "{err}");
        // Plaintext written before is read by the identity provider.
        assert_eq!(e.decrypt(SECRET, plain.clone().into()).unwrap(), plain);
        let map = "/registry/core/configmaps/default/c";
        assert_eq!(e.encrypt(map, plain.clone()).unwrap(), plain);
    }

    #[test]
    fn keys_rotate_the_first_writes_and_every_one_reads() {
        let old = Encryption::parse(&config(KEY1)).unwrap();
        let written = old.encrypt(SECRET, b"{}".to_vec()).unwrap();
        let rotated = Encryption::parse(&config(&format!("{KEY2}{KEY1}"))).unwrap();
        assert_eq!(rotated.decrypt(SECRET, written.into()).unwrap(), &b"{}"[..]);
        let new = rotated.encrypt(SECRET, b"{}".to_vec()).unwrap();
        assert!(new.starts_with(b"k8s:enc:aesgcm:v1:key2:"));
        let err = old.decrypt(SECRET, new.into()).unwrap_err();
        assert!(err.to_string().contains("key2"), "{err}");
        // Without identity, plaintext is refused rather than trusted.
        let err = old.decrypt(SECRET, b"{}".to_vec().into()).unwrap_err();
        assert!(err.to_string().contains("identity"), "{err}");
    }

    #[test]
    fn a_generated_configuration_parses_and_bad_ones_are_refused_clearly() {
        let generated = Encryption::generate_config().unwrap();
        let e = Encryption::parse(&generated).unwrap();
        assert!(e
            .encrypt(SECRET, b"{}".to_vec())
            .unwrap()
            .starts_with(ENCRYPTED));
        for (text, says) in [
            (config("    - aescbc:\n        keys: []\n"), "not supported"),
            (
                config(
                    "    - aesgcm:\n        keys:\n        - name: k\n          secret: c2hvcnQ=\n",
                ),
                "use 16 or 32",
            ),
            (config("    - aesgcm:\n        keys: []\n"), "no keys"),
            (
                "kind: Pod\napiVersion: v1\n".to_string(),
                "EncryptionConfiguration",
            ),
            (
                config(KEY1).replace("[secrets]", "[widgets]"),
                "unknown resource",
            ),
        ] {
            let err = Encryption::parse(&text).err().unwrap();
            assert!(err.contains(says), "{err} should say {says}");
        }
    }
}
