//! The users of the HTTP API and console (`--http-users`) and their roles.
//!
//! The file holds one user per line, `name:role:hash`, where the hash is an
//! argon2 PHC string (`chime-scheduler hash-password` makes one); blank
//! lines and lines starting with `#` are ignored. Passwords are checked with
//! the `argon2` crate, whose verification compares in constant time.

use argon2::password_hash::rand_core::OsRng;
use argon2::password_hash::{PasswordHash, PasswordHasher, PasswordVerifier, SaltString};
use argon2::Argon2;
use chime_common::api::Access;
use chime_common::bounds::check_name;
use std::collections::HashMap;
use std::fmt;
use std::path::Path;
use std::str::FromStr;

/// What a user may do (CONTRACT.md v1.1): `viewer` reads, `operator` also
/// drives jobs and firings, `admin` also changes definitions.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Role {
    Viewer,
    Operator,
    Admin,
}

impl Role {
    /// Whether this role may call a verb of this kind.
    pub fn allows(self, access: Access) -> bool {
        let needed = match access {
            Access::Read => Role::Viewer,
            Access::Operate => Role::Operator,
            Access::Administer => Role::Admin,
        };
        self >= needed
    }

    /// The wire name.
    pub fn as_str(self) -> &'static str {
        match self {
            Role::Viewer => "viewer",
            Role::Operator => "operator",
            Role::Admin => "admin",
        }
    }
}

impl fmt::Display for Role {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl FromStr for Role {
    type Err = String;

    fn from_str(s: &str) -> Result<Role, String> {
        match s {
            "viewer" => Ok(Role::Viewer),
            "operator" => Ok(Role::Operator),
            "admin" => Ok(Role::Admin),
            other => Err(format!(
                "role {other:?} is not one of viewer, operator, admin"
            )),
        }
    }
}

/// One user of the file.
#[derive(Clone)]
pub struct User {
    pub name: String,
    pub role: Role,
    /// The argon2 PHC string.
    hash: String,
}

impl fmt::Debug for User {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("User")
            .field("name", &self.name)
            .field("role", &self.role)
            .finish_non_exhaustive()
    }
}

/// Every user, by name.
#[derive(Debug, Clone, Default)]
pub struct Users {
    by_name: HashMap<String, User>,
}

/// Verified against when the name is unknown, so an unknown name costs the
/// same time as a wrong password and does not reveal which names exist.
const DECOY_HASH: &str =
    "$argon2id$v=19$m=19456,t=2,p=1$c29tZXNhbHRzb21lc2FsdA$Fy0ZbV7VjFHsDYRIZnMZtZUAzQ7h3ZlpnT7yuSP6Edw";

impl Users {
    /// Reads a users file; the error names the file and line.
    pub fn load(path: &Path) -> Result<Users, String> {
        let text = std::fs::read_to_string(path)
            .map_err(|e| format!("--http-users: cannot read {}: {e}", path.display()))?;
        Users::parse(&text).map_err(|e| format!("--http-users {}: {e}", path.display()))
    }

    /// Parses the text of a users file.
    pub fn parse(text: &str) -> Result<Users, String> {
        let mut by_name = HashMap::new();
        for (number, line) in text.lines().enumerate() {
            let line = line.trim();
            if line.is_empty() || line.starts_with('#') {
                continue;
            }
            let at = |e: String| format!("line {}: {e}", number + 1);
            let mut parts = line.splitn(3, ':');
            let (Some(name), Some(role), Some(hash)) = (parts.next(), parts.next(), parts.next())
            else {
                return Err(at("expected name:role:argon2-hash".into()));
            };
            check_name(name, 64).map_err(|e| at(format!("user name {e}")))?;
            let role = role.parse::<Role>().map_err(at)?;
            PasswordHash::new(hash)
                .map_err(|e| at(format!("the hash is not an argon2 PHC string: {e}")))?;
            let user = User {
                name: name.to_string(),
                role,
                hash: hash.to_string(),
            };
            if by_name.insert(name.to_string(), user).is_some() {
                return Err(at(format!("user {name:?} appears twice")));
            }
        }
        Ok(Users { by_name })
    }

    /// Whether the file named no user.
    pub fn is_empty(&self) -> bool {
        self.by_name.is_empty()
    }

    /// The user of this name.
    pub fn get(&self, name: &str) -> Option<&User> {
        self.by_name.get(name)
    }

    /// The user, if `password` is theirs. Slow on purpose (argon2): call it
    /// off the async threads.
    pub fn verify(&self, name: &str, password: &str) -> Option<&User> {
        let user = self.by_name.get(name);
        let hash = user.map_or(DECOY_HASH, |u| u.hash.as_str());
        let parsed = PasswordHash::new(hash).ok()?;
        let valid = Argon2::default()
            .verify_password(password.as_bytes(), &parsed)
            .is_ok();
        user.filter(|_| valid)
    }
}

/// An argon2id hash of `password` with a random salt, as the users file takes it.
pub fn hash_password(password: &str) -> Result<String, String> {
    let salt = SaltString::generate(&mut OsRng);
    Argon2::default()
        .hash_password(password.as_bytes(), &salt)
        .map(|h| h.to_string())
        .map_err(|e| format!("cannot hash the password: {e}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn users_file_round_trip_and_roles() {
        let hash = hash_password("s3cret").unwrap();
        let text = format!("# team\n\nalice:admin:{hash}\nbob:viewer:{hash}\n");
        let users = Users::parse(&text).unwrap();
        assert_eq!(
            users.verify("alice", "s3cret").map(|u| u.role),
            Some(Role::Admin)
        );
        assert!(users.verify("alice", "wrong").is_none());
        assert!(users.verify("carol", "s3cret").is_none());
        let bob = users.get("bob").unwrap().role;
        assert!(bob.allows(Access::Read));
        assert!(!bob.allows(Access::Operate));
        assert!(Role::Operator.allows(Access::Operate));
        assert!(!Role::Operator.allows(Access::Administer));
        assert!(Role::Admin.allows(Access::Administer));
        assert!(!format!("{:?}", users.get("bob")).contains("argon2"));
    }

    #[test]
    fn bad_users_files_name_the_line() {
        let hash = hash_password("x").unwrap();
        for (text, wanted) in [
            ("alice\n".to_string(), "line 1: expected"),
            (format!("a:root:{hash}"), "line 1: role \"root\""),
            ("a:admin:plain".to_string(), "line 1: the hash"),
            (format!("a b:admin:{hash}"), "line 1: user name"),
            (
                format!("a:admin:{hash}\na:viewer:{hash}"),
                "line 2: user \"a\" appears twice",
            ),
        ] {
            let e = Users::parse(&text).unwrap_err();
            assert!(e.starts_with(wanted), "{text:?}: {e}");
        }
    }

    #[test]
    fn the_decoy_hash_parses() {
        assert!(PasswordHash::new(DECOY_HASH).is_ok());
    }
}
