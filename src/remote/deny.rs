//! `--no-remote-local-addresses` and `--remote-denied-cidrs`: networks that HTTP resources and
//! Git bases may not reach. Checked on every address a host name resolves to (a name that
//! resolves to one denied address is refused, whatever else it resolves to) and on IP literals,
//! before connecting, for every redirect too. Off by default, as Flux reaches anything.

use std::future::Future;
use std::io;
use std::net::{IpAddr, SocketAddr};
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use hyper_util::client::legacy::connect::dns::Name;

/// Loopback, link-local (the cloud metadata service at 169.254.169.254 among them), the
/// unspecified addresses (which reach this host) and the IPv6 metadata address fd00:ec2::254.
const LOCAL: [&str; 7] = [
    "127.0.0.0/8",
    "169.254.0.0/16",
    "0.0.0.0/8",
    "::1/128",
    "::/128",
    "fe80::/10",
    "fd00:ec2::254/128",
];

/// An IPv4 or IPv6 network, `address/prefix`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Cidr {
    address: IpAddr,
    prefix: u8,
}

impl Cidr {
    /// Parses `10.0.0.0/8`, `fd00::/8`, or a bare address (a single host).
    pub fn parse(text: &str) -> Result<Self, String> {
        let invalid = || format!("'{text}' is not a CIDR (address/prefix)");
        let (address, prefix) = match text.trim().split_once('/') {
            Some((address, prefix)) => (address, Some(prefix)),
            None => (text.trim(), None),
        };
        let address: IpAddr = address.parse().map_err(|_| invalid())?;
        let bits = if address.is_ipv4() { 32 } else { 128 };
        let prefix = match prefix {
            Some(p) => p.parse::<u8>().ok().filter(|p| *p <= bits).ok_or_else(invalid)?,
            None => bits,
        };
        Ok(Cidr { address, prefix })
    }

    fn contains(&self, ip: IpAddr) -> bool {
        let (net, ip, bits) = match (self.address, ip) {
            (IpAddr::V4(net), IpAddr::V4(ip)) => (u32::from(net) as u128, u32::from(ip) as u128, 32),
            (IpAddr::V6(net), IpAddr::V6(ip)) => (u128::from(net), u128::from(ip), 128),
            _ => return false,
        };
        let shift = bits - u32::from(self.prefix);
        // A /0 shifts every bit out: everything matches.
        net.checked_shr(shift).unwrap_or(0) == ip.checked_shr(shift).unwrap_or(0)
    }
}

impl std::fmt::Display for Cidr {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}/{}", self.address, self.prefix)
    }
}

/// The networks remote fetches may not reach; empty by default.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct DeniedNetworks {
    cidrs: Vec<Cidr>,
}

impl DeniedNetworks {
    /// The local networks when `local`, and the operator's `cidrs`.
    pub fn new(local: bool, cidrs: &[Cidr]) -> Self {
        let mut all: Vec<Cidr> = cidrs.to_vec();
        if local {
            all.extend(
                LOCAL
                    .iter()
                    .map(|c| Cidr::parse(c).expect("a valid built-in CIDR")),
            );
        }
        DeniedNetworks { cidrs: all }
    }

    /// Refuses `ip`, which `host` names or resolves to, when a denied network holds it (an
    /// IPv4-mapped IPv6 address counts as its IPv4 address).
    pub(crate) fn check(&self, host: &str, ip: IpAddr) -> Result<(), String> {
        let ip = ip.to_canonical();
        match self.cidrs.iter().find(|c| c.contains(ip)) {
            None => Ok(()),
            Some(cidr) => Err(format!(
                "host '{host}' is at {ip}, in the denied network {cidr} (--no-remote-local-addresses, --remote-denied-cidrs)"
            )),
        }
    }
}

/// The lockdown flags of remote fetching, shared by `run` and `build`.
#[derive(Clone, Debug, Default, clap::Args)]
pub struct RemoteLockdownArgs {
    /// With --no-remote-bases=true, refuse HTTP file resources too (Flux still fetches them).
    #[arg(long = "no-remote-bases-include-http", default_value = "false", num_args = 0..=1, require_equals = true, default_missing_value = "true", value_parser = flux_runtime::options::go_bool, action = clap::ArgAction::Set)]
    pub no_remote_bases_include_http: bool,
    /// Refuse HTTP resources, Git bases and redirects to loopback, link-local (cloud metadata:
    /// 169.254.169.254, fd00:ec2::254) and unspecified addresses, after DNS resolution.
    #[arg(long = "no-remote-local-addresses", default_value = "false", num_args = 0..=1, require_equals = true, default_missing_value = "true", value_parser = flux_runtime::options::go_bool, action = clap::ArgAction::Set)]
    pub no_remote_local_addresses: bool,
    /// Further networks remote resources may not reach: CIDRs, comma-separated or repeated.
    #[arg(long = "remote-denied-cidrs", value_delimiter = ',', value_parser = Cidr::parse)]
    pub remote_denied_cidrs: Vec<Cidr>,
}

impl RemoteLockdownArgs {
    /// `config` with these flags applied; `config.allow_git` is `--no-remote-bases`' answer.
    pub fn apply(&self, config: super::RemoteConfig) -> super::RemoteConfig {
        super::RemoteConfig {
            allow_http_files: config.allow_git || !self.no_remote_bases_include_http,
            denied: DeniedNetworks::new(self.no_remote_local_addresses, &self.remote_denied_cidrs),
            ..config
        }
    }
}

/// The connector's resolver: the system's, refusing a name with a denied address.
#[derive(Clone, Debug, Default)]
pub(crate) struct GuardedResolver {
    pub denied: Arc<DeniedNetworks>,
}

impl tower::Service<Name> for GuardedResolver {
    type Response = std::vec::IntoIter<SocketAddr>;
    type Error = io::Error;
    type Future = Pin<Box<dyn Future<Output = Result<Self::Response, io::Error>> + Send>>;

    fn poll_ready(&mut self, _: &mut Context<'_>) -> Poll<Result<(), io::Error>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, name: Name) -> Self::Future {
        let denied = self.denied.clone();
        Box::pin(async move {
            let host = name.as_str();
            let addresses: Vec<SocketAddr> = tokio::net::lookup_host((host, 0)).await?.collect();
            for address in &addresses {
                denied
                    .check(host, address.ip())
                    .map_err(|e| io::Error::new(io::ErrorKind::PermissionDenied, e))?;
            }
            Ok(addresses.into_iter())
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ip(text: &str) -> IpAddr {
        text.parse().unwrap()
    }

    #[test]
    fn local_networks_cover_loopback_link_local_and_metadata() {
        let local = DeniedNetworks::new(true, &[]);
        for denied in [
            "127.0.0.1",
            "127.8.9.10",
            "169.254.169.254",
            "0.0.0.0",
            "::1",
            "::",
            "fe80::1",
            "fd00:ec2::254",
            "::ffff:127.0.0.1",
            "::ffff:169.254.169.254",
        ] {
            assert!(local.check("h", ip(denied)).is_err(), "{denied}");
        }
        for allowed in [
            "10.0.0.1",
            "8.8.8.8",
            "128.0.0.1",
            "169.255.0.1",
            "fd00:ec2::253",
            "2001:db8::1",
        ] {
            assert!(local.check("h", ip(allowed)).is_ok(), "{allowed}");
        }
        assert!(
            DeniedNetworks::default().check("h", ip("127.0.0.1")).is_ok(),
            "nothing is denied unless asked"
        );
    }

    #[test]
    fn operator_cidrs_are_denied_and_named() {
        let cidrs: Vec<Cidr> = ["10.0.0.0/8", "fd00::/8", "192.0.2.7", "0.0.0.0/0"]
            .iter()
            .map(|c| Cidr::parse(c).unwrap())
            .collect();
        let denied = DeniedNetworks::new(false, &cidrs[..3]);
        assert_eq!(
            denied.check("git.internal", ip("10.1.2.3")).unwrap_err(),
            "host 'git.internal' is at 10.1.2.3, in the denied network 10.0.0.0/8 (--no-remote-local-addresses, --remote-denied-cidrs)"
        );
        assert!(denied.check("h", ip("fdff::1")).is_err());
        assert!(denied.check("h", ip("192.0.2.7")).is_err());
        assert!(denied.check("h", ip("192.0.2.8")).is_ok());
        assert!(denied.check("h", ip("127.0.0.1")).is_ok());
        let everything = DeniedNetworks::new(false, &cidrs[3..]);
        assert!(everything.check("h", ip("203.0.113.1")).is_err());
        assert!(
            everything.check("h", ip("2001:db8::1")).is_ok(),
            "an IPv4 network"
        );
        for bad in ["10.0.0.0/33", "example.com", "::/129", "10.0.0.0/x"] {
            assert!(Cidr::parse(bad).is_err(), "{bad}");
        }
    }
}
