//! Basic authentication (RFC 7617) against the bcrypt hashes of `--web.config.file`.
//!
//! A bcrypt costs tens of milliseconds by design, so credentials that verified are
//! remembered (as a SHA-256 of the user, the hash and the password, never the password
//! itself), as exporter-toolkit does: a scrape with them costs no bcrypt again.

use std::collections::{BTreeMap, HashSet};
use std::sync::Mutex;

use base64::Engine as _;

/// Most credentials remembered; past it the memory is cleared and starts again.
const MAX_REMEMBERED: usize = 64;

/// The users and what verified.
#[derive(Debug)]
pub struct BasicAuth {
    users: BTreeMap<String, String>,
    verified: Mutex<HashSet<[u8; 32]>>,
}

/// What a request's `Authorization` header comes to before any bcrypt.
#[derive(Debug)]
pub enum Check {
    /// Verified before.
    Allowed,
    /// No credentials, or not basic ones, or not decodable: no bcrypt needed.
    Denied,
    /// A bcrypt to run, with [`BasicAuth::verify`], off the serving thread.
    Verify(Pending),
}

/// Credentials to verify.
#[derive(Debug)]
pub struct Pending {
    known_user: bool,
    password: Vec<u8>,
    hash: String,
    key: [u8; 32],
}

impl BasicAuth {
    /// `None` when there are no users: no authentication.
    pub fn new(users: BTreeMap<String, String>) -> Option<BasicAuth> {
        (!users.is_empty()).then(|| BasicAuth {
            users,
            verified: Mutex::new(HashSet::new()),
        })
    }

    pub fn check(&self, authorization: Option<&[u8]>) -> Check {
        let Some((user, password)) = authorization.and_then(credentials) else {
            return Check::Denied;
        };
        // An unknown user costs a bcrypt too (against the first user's hash), so that
        // the time of an answer does not say which users exist.
        let (known_user, hash) = match self.users.get(&user) {
            Some(hash) => (true, hash),
            None => match self.users.values().next() {
                Some(hash) => (false, hash),
                None => return Check::Denied,
            },
        };
        let key = remembered_key(&user, hash, &password);
        if known_user && self.verified.lock().is_ok_and(|v| v.contains(&key)) {
            return Check::Allowed;
        }
        Check::Verify(Pending {
            known_user,
            password,
            hash: hash.clone(),
            key,
        })
    }

    /// Runs the bcrypt; remembers credentials that verified.
    pub fn verify(&self, pending: Pending) -> bool {
        let matches = bcrypt::verify(&pending.password, &pending.hash).unwrap_or(false);
        let allowed = matches && pending.known_user;
        if allowed && let Ok(mut verified) = self.verified.lock() {
            if verified.len() >= MAX_REMEMBERED {
                verified.clear();
            }
            verified.insert(pending.key);
        }
        allowed
    }
}

/// The user and password of a `Basic` header (RFC 7617 2: the scheme is
/// case-insensitive; the user-id ends at the first colon).
fn credentials(header: &[u8]) -> Option<(String, Vec<u8>)> {
    let text = std::str::from_utf8(header).ok()?.trim();
    let (scheme, encoded) = text.split_once(' ')?;
    if !scheme.eq_ignore_ascii_case("basic") {
        return None;
    }
    let decoded = base64::engine::general_purpose::STANDARD
        .decode(encoded.trim())
        .ok()?;
    let colon = decoded.iter().position(|&b| b == b':')?;
    let user = String::from_utf8(decoded[..colon].to_vec()).ok()?;
    Some((user, decoded[colon + 1..].to_vec()))
}

fn remembered_key(user: &str, hash: &str, password: &[u8]) -> [u8; 32] {
    let mut context = ring::digest::Context::new(&ring::digest::SHA256);
    for part in [user.as_bytes(), hash.as_bytes(), password] {
        context.update(&(part.len() as u64).to_le_bytes());
        context.update(part);
    }
    let mut key = [0; 32];
    key.copy_from_slice(context.finish().as_ref());
    key
}

#[cfg(test)]
mod tests {
    use super::*;

    fn header(user: &str, password: &str) -> Vec<u8> {
        let encoded =
            base64::engine::general_purpose::STANDARD.encode(format!("{user}:{password}"));
        format!("Basic {encoded}").into_bytes()
    }

    fn run(auth: &BasicAuth, header: Option<&[u8]>) -> (bool, bool) {
        match auth.check(header) {
            Check::Allowed => (true, false),
            Check::Denied => (false, false),
            Check::Verify(pending) => (auth.verify(pending), true),
        }
    }

    #[test]
    fn right_credentials_pass_once_verified_without_bcrypt() {
        let hash = bcrypt::hash("secret", 4).unwrap();
        let auth = BasicAuth::new(BTreeMap::from([("prom".to_string(), hash)])).unwrap();
        let right = header("prom", "secret");
        assert_eq!(run(&auth, Some(&right)), (true, true), "first: a bcrypt");
        assert_eq!(run(&auth, Some(&right)), (true, false), "then remembered");
        assert_eq!(run(&auth, Some(&header("prom", "wrong"))), (false, true));
        assert_eq!(run(&auth, Some(&header("other", "secret"))), (false, true));
        assert_eq!(run(&auth, None), (false, false));
        assert_eq!(run(&auth, Some(b"Bearer abc")), (false, false));
        assert_eq!(run(&auth, Some(b"Basic !!!")), (false, false));
        let lower = String::from_utf8(right)
            .unwrap()
            .replacen("Basic", "basic", 1);
        assert_eq!(run(&auth, Some(lower.as_bytes())), (true, false));
    }

    #[test]
    fn no_users_no_authentication() {
        assert!(BasicAuth::new(BTreeMap::new()).is_none());
    }
}
