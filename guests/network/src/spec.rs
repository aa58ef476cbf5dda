//! Validation of a Network's `spec`.
//!
//! The CRD carries the same rules as CEL, but an API server without them (or an object written
//! before they existed) can still hand us anything, and the backend must never see a bad
//! spec. Pure functions, tested natively.

use std::fmt;
use std::net::IpAddr;

use ipnet::IpNet;
use reconciler_guest::serde_json::Value;

/// A spec that passed every rule.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ValidSpec {
    pub cidr: IpNet,
    pub gateway: IpAddr,
}

/// The first rule a spec breaks: which field, and what it must be.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SpecError {
    pub field: &'static str,
    pub rule: String,
}

impl fmt::Display for SpecError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} {}", self.field, self.rule)
    }
}

fn broken(field: &'static str, rule: String) -> SpecError {
    SpecError { field, rule }
}

/// Checks `spec.cidr` and `spec.gateway`:
///
/// - `cidr` is an IPv4 or IPv6 prefix (`10.10.0.0/24`, `fd00::/64`) with no host bits set;
/// - `gateway` is an address of the same family, inside `cidr`, and neither its network
///   address nor (IPv4, prefixes up to /30) its broadcast address.
///
/// # Errors
///
/// The first rule broken, cidr before gateway.
pub fn validate(spec: &Value) -> Result<ValidSpec, SpecError> {
    let cidr_text = string_field(spec, "cidr", "spec.cidr")?;
    let gateway_text = string_field(spec, "gateway", "spec.gateway")?;

    let cidr: IpNet = cidr_text.parse().map_err(|_| {
        broken(
            "spec.cidr",
            format!("{cidr_text:?} must be an IPv4 or IPv6 prefix such as 10.10.0.0/24"),
        )
    })?;
    if cidr.trunc() != cidr {
        return Err(broken(
            "spec.cidr",
            format!(
                "{cidr_text} must not have host bits set (did you mean {}?)",
                cidr.trunc()
            ),
        ));
    }

    let gateway: IpAddr = gateway_text.parse().map_err(|_| {
        broken(
            "spec.gateway",
            format!("{gateway_text:?} must be an IPv4 or IPv6 address"),
        )
    })?;
    if gateway.is_ipv4() != cidr.addr().is_ipv4() {
        return Err(broken(
            "spec.gateway",
            format!("{gateway} must be of the same address family as spec.cidr {cidr}"),
        ));
    }
    if !cidr.contains(&gateway) {
        return Err(broken(
            "spec.gateway",
            format!("{gateway} must lie inside spec.cidr {cidr}"),
        ));
    }
    if gateway == cidr.network() {
        return Err(broken(
            "spec.gateway",
            format!("{gateway} must not be the network address of spec.cidr {cidr}"),
        ));
    }
    // /31 and /32 have no broadcast address (RFC 3021); IPv6 has none at all.
    if gateway.is_ipv4() && cidr.prefix_len() < 31 && gateway == cidr.broadcast() {
        return Err(broken(
            "spec.gateway",
            format!("{gateway} must not be the broadcast address of spec.cidr {cidr}"),
        ));
    }
    Ok(ValidSpec { cidr, gateway })
}

fn string_field<'a>(spec: &'a Value, key: &str, field: &'static str) -> Result<&'a str, SpecError> {
    match spec.get(key) {
        None | Some(Value::Null) => Err(broken(field, "is required".to_owned())),
        Some(Value::String(s)) if s.trim().is_empty() => {
            Err(broken(field, "must not be empty".to_owned()))
        }
        Some(Value::String(s)) => Ok(s),
        Some(other) => Err(broken(field, format!("must be a string, not {other}"))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use reconciler_guest::serde_json::json;

    fn check(cidr: &str, gateway: &str) -> Result<ValidSpec, String> {
        validate(&json!({"cidr": cidr, "gateway": gateway})).map_err(|e| e.to_string())
    }

    #[test]
    fn accepts_ipv4_and_ipv6_networks_with_a_gateway_inside() {
        let v4 = check("10.10.0.0/24", "10.10.0.1").unwrap();
        assert_eq!(v4.cidr.to_string(), "10.10.0.0/24");
        assert_eq!(v4.gateway.to_string(), "10.10.0.1");
        check("fd00:10::/64", "fd00:10::1").unwrap();
        check("192.168.7.0/31", "192.168.7.1").unwrap();
        check("10.0.0.0/8", "10.255.255.254").unwrap();
    }

    #[test]
    fn rejects_missing_and_non_string_fields_naming_the_field() {
        let e = validate(&json!({"gateway": "10.0.0.1"})).unwrap_err();
        assert_eq!((e.field, e.rule.as_str()), ("spec.cidr", "is required"));
        let e = validate(&json!({"cidr": "10.0.0.0/24", "gateway": 7})).unwrap_err();
        assert_eq!(e.to_string(), "spec.gateway must be a string, not 7");
        let e = validate(&json!({"cidr": " ", "gateway": "10.0.0.1"})).unwrap_err();
        assert_eq!(e.to_string(), "spec.cidr must not be empty");
        assert_eq!(validate(&Value::Null).unwrap_err().field, "spec.cidr");
    }

    #[test]
    fn rejects_malformed_prefixes_and_host_bits() {
        assert!(
            check("10.0.0.0", "10.0.0.1")
                .unwrap_err()
                .starts_with("spec.cidr \"10.0.0.0\" must be an IPv4 or IPv6 prefix")
        );
        assert!(
            check("10.0.0.0/33", "10.0.0.1")
                .unwrap_err()
                .starts_with("spec.cidr")
        );
        assert!(
            check("banana", "10.0.0.1")
                .unwrap_err()
                .starts_with("spec.cidr")
        );
        assert_eq!(
            check("10.0.0.5/24", "10.0.0.1").unwrap_err(),
            "spec.cidr 10.0.0.5/24 must not have host bits set (did you mean 10.0.0.0/24?)"
        );
    }

    #[test]
    fn rejects_gateways_outside_or_at_the_edges_of_the_network() {
        assert_eq!(
            check("10.0.0.0/24", "10.0.1.1").unwrap_err(),
            "spec.gateway 10.0.1.1 must lie inside spec.cidr 10.0.0.0/24"
        );
        assert_eq!(
            check("10.0.0.0/24", "fd00::1").unwrap_err(),
            "spec.gateway fd00::1 must be of the same address family as spec.cidr 10.0.0.0/24"
        );
        assert!(
            check("10.0.0.0/24", "10.0.0.0")
                .unwrap_err()
                .contains("network address")
        );
        assert!(
            check("10.0.0.0/24", "10.0.0.255")
                .unwrap_err()
                .contains("broadcast address")
        );
        assert!(
            check("fd00::/64", "fd00::")
                .unwrap_err()
                .contains("network address")
        );
        assert!(
            check("10.0.0.1/32", "10.0.0.1")
                .unwrap_err()
                .contains("network address")
        );
        assert!(
            check("10.0.0.0/24", "10.0.0.300")
                .unwrap_err()
                .starts_with("spec.gateway \"10.0.0.300\" must be")
        );
    }
}
