//! Who is calling: the identity a request authenticated as (or the anonymous caller), its tenant
//! and its roles. `front::auth` decides it per request; a batch carries it, sessions are
//! namespaced by its tenant, and permission rules may match on it.

use std::fmt;

/// A role grants a set of RPCs (see `front::auth`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Role {
    /// Dispatch, list tools, read and end its tenant's sessions.
    Agent,
    /// Everything: registration RPCs, accepting changed tools, tool health.
    Admin,
    /// Answers, lists and watches the pending approvals of its tenant's batches.
    Approver,
}

impl Role {
    /// The role a config or token names (`agent`, `admin`, `approver`).
    pub fn parse(name: &str) -> Option<Role> {
        match name {
            "agent" => Some(Role::Agent),
            "admin" => Some(Role::Admin),
            "approver" => Some(Role::Approver),
            _ => None,
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            Role::Agent => "agent",
            Role::Admin => "admin",
            Role::Approver => "approver",
        }
    }
}

/// How the caller proved who it is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Method {
    /// No credentials; allowed only when `[auth] anonymous` is on.
    Anonymous,
    /// A bearer token from `[[auth.tokens]]`.
    Token,
    /// A JWT validated against the configured keys.
    Jwt,
    /// A TLS client certificate named in `[[auth.certificates]]`.
    Certificate,
}

impl Method {
    pub fn name(self) -> &'static str {
        match self {
            Method::Anonymous => "anonymous",
            Method::Token => "token",
            Method::Jwt => "jwt",
            Method::Certificate => "certificate",
        }
    }
}

/// An authenticated (or anonymous) caller.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Caller {
    /// The identity: a token's configured id, a JWT's subject, a certificate's name, or
    /// `anonymous`.
    pub id: String,
    /// Sessions, memory, scratch and cache entries are namespaced by tenant.
    pub tenant: String,
    pub roles: Vec<Role>,
    pub method: Method,
}

impl Caller {
    /// The caller of an embedder's in-process batch and of every request when authentication
    /// is not configured: tenant `default`, every role.
    pub fn local() -> Self {
        Caller {
            id: "anonymous".to_owned(),
            tenant: DEFAULT_TENANT.to_owned(),
            roles: vec![Role::Agent, Role::Admin],
            method: Method::Anonymous,
        }
    }

    pub fn has(&self, role: Role) -> bool {
        self.roles.contains(&role)
    }

    /// The roles as config names them, comma-separated (for logs).
    pub fn role_names(&self) -> String {
        let names: Vec<&str> = self.roles.iter().map(|r| r.name()).collect();
        names.join(",")
    }
}

impl fmt::Display for Caller {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{} (tenant {}, {})",
            self.id,
            self.tenant,
            self.method.name()
        )
    }
}

/// The tenant of anonymous callers unless configured otherwise.
pub const DEFAULT_TENANT: &str = "default";

/// A tenant name that is not 1 to 64 characters of `[A-Za-z0-9._-]`.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "tenant '{}' must be 1 to 64 characters of letters, digits, '-', '_' or '.'",
    .0.escape_debug()
)]
pub struct InvalidTenant(pub String);

/// Checks a tenant name: 1 to 64 characters of `[A-Za-z0-9._-]` (it becomes part of session
/// keys and log lines).
pub fn validate_tenant(tenant: &str) -> Result<(), InvalidTenant> {
    let valid = !tenant.is_empty()
        && tenant.len() <= 64
        && tenant
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.'));
    if valid {
        Ok(())
    } else {
        Err(InvalidTenant(tenant.to_owned()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn roles_and_tenants_parse_strictly() {
        assert_eq!(Role::parse("admin"), Some(Role::Admin));
        assert_eq!(Role::parse("Admin"), None);
        assert!(validate_tenant("acme-prod.1").is_ok());
        for bad in ["", "a/b", "a\nb", &"x".repeat(65)] {
            assert!(validate_tenant(bad).is_err(), "{bad:?}");
        }
        let local = Caller::local();
        assert!(local.has(Role::Admin) && local.has(Role::Agent));
        assert_eq!(local.role_names(), "agent,admin");
    }
}
