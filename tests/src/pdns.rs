//! PowerDNS authoritative servers (Debian's pdns-server 4.7, sqlite3 backend) started by
//! `tools/pdns/pdns`, for tests of guests that manage DNS records through PowerDNS's REST API.
//! Each test starts its own server on free loopback ports; the test reads what it serves with
//! `dig` and changes records behind the controller's back through the same API.
//!
//! ```no_run
//! # async fn demo() -> anyhow::Result<()> {
//! use reconciler_host_tests::pdns::PowerDns;
//! let pdns = PowerDns::private("my-test").await?;
//! pdns.create_zone("example.test.").await?;
//! pdns.set_rrset("example.test.", "www.example.test.", "A", 300, &["192.0.2.1"]).await?;
//! assert_eq!(pdns.dig("www.example.test.", "A").await?, ["192.0.2.1"]);
//! pdns.stop().await?; // PowerDNS is down: the API and DNS refuse connections
//! pdns.start_again().await?; // same ports, key and records
//! # Ok(()) }
//! ```
//!
//! Names are absolute (ending with `.`) and lower case, as the API returns them; contents are
//! in zone-file form, as the API takes and returns them (a TXT content is quoted:
//! `"\"v=spf1 -all\""`). A guest reaches the API at [`PowerDns::api_url`]
//! `/api/v1/servers/localhost/...` with the header `X-API-Key: `[`PowerDns::api_key`].
//!
//! The API is spoken to with `curl`, which the script needs anyway: the tests crate has no HTTP
//! client, and one for a handful of requests is not worth a dependency (the key reaches curl on
//! its standard input, not its command line).
//!
//! Cost: installing four Debian packages once per machine; then starting a server takes about
//! 0.3 s and 60 MB of resident memory, and each call here one `curl` or `dig` process.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::Stdio;

use anyhow::{Context, Result, bail, ensure};
use serde_json::{Value, json};
use tokio::io::AsyncWriteExt;

use crate::paths::{private_dir, repo_root, run_script};

/// `tools/pdns/pdns`, the script that starts and stops PowerDNS servers.
pub fn pdns_script() -> PathBuf {
    repo_root().join("tools/pdns/pdns")
}

/// A running PowerDNS in a directory of its own; stopped, and the directory removed, on drop
/// (or by the script's watchdog when the test process dies without dropping it).
#[derive(Debug)]
pub struct PowerDns {
    dir: PathBuf,
    endpoints: Endpoints,
}

/// What `up` left in the directory (`endpoints`, `api-key`). A value of its own, without
/// [`PowerDns`]'s drop, so reading them again stops nothing.
#[derive(Debug, PartialEq, Eq)]
struct Endpoints {
    api_url: String,
    api_key: String,
    dns_addr: SocketAddr,
}

/// What the API answered: the HTTP status and the body.
#[derive(Debug)]
pub struct ApiAnswer {
    pub status: u16,
    pub body: String,
}

impl ApiAnswer {
    /// The body as JSON.
    pub fn json(&self) -> Result<Value> {
        serde_json::from_str(&self.body).with_context(|| {
            format!(
                "the API answered {} with no JSON: {}",
                self.status, self.body
            )
        })
    }
}

impl PowerDns {
    /// Starts PowerDNS in `dir` (`pdns up DIR --exit-with <this process>`): a fresh directory
    /// gets a new database, key and free ports; one a stopped server left keeps them. One value
    /// per directory: dropping it removes the directory.
    pub async fn start(dir: impl AsRef<Path>) -> Result<Self> {
        let dir = dir.as_ref().to_path_buf();
        up(&dir).await?;
        let endpoints = Endpoints::read(&dir)?;
        Ok(Self { dir, endpoints })
    }

    /// Starts PowerDNS in `<target>/pdns/private-<name>-<pid>-<n>`, a directory no other
    /// test uses.
    pub async fn private(name: &str) -> Result<Self> {
        Self::start(private_dir("pdns", name)).await
    }

    /// `http://127.0.0.1:PORT`, the webserver the REST API lives under (`/api/v1`).
    pub fn api_url(&self) -> &str {
        &self.endpoints.api_url
    }

    /// The key the API demands in the `X-API-Key` header.
    pub fn api_key(&self) -> &str {
        &self.endpoints.api_key
    }

    /// Where DNS is served, over UDP and TCP.
    pub fn dns_addr(&self) -> SocketAddr {
        self.endpoints.dns_addr
    }

    /// The server's directory (database, `pdns.conf`, `pdns.log`).
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// Creates the Native zone `zone` with an SOA and an NS (`pdns zone`); one that exists is
    /// left as it is.
    pub async fn create_zone(&self, zone: &str) -> Result<()> {
        run_script(
            &pdns_script(),
            ["zone".as_ref(), self.dir.as_os_str(), zone.as_ref()],
        )
        .await?;
        Ok(())
    }

    /// Sends `method` to `/api/v1/servers/localhost{path}` with `key` (which may be wrong, for
    /// a test of refusals) and `body` as JSON. Fails only if no HTTP answer came.
    pub async fn request_with_key(
        &self,
        key: &str,
        method: &str,
        path: &str,
        body: Option<&Value>,
    ) -> Result<ApiAnswer> {
        let url = format!("{}/api/v1/servers/localhost{path}", self.api_url());
        let mut command = tokio::process::Command::new("curl");
        command.args([
            "-sS",
            "--noproxy",
            "*",
            "--max-time",
            "10",
            "-K",
            "-",
            "-X",
            method,
        ]);
        if let Some(body) = body {
            command
                .args(["-H", "Content-Type: application/json", "--data-binary"])
                .arg(body.to_string());
        }
        let mut child = command
            .args(["-w", "\n%{http_code}", &url])
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .kill_on_drop(true)
            .spawn()
            .context("running curl (Debian package curl)")?;
        // curl's configuration syntax: a quoted value with \ and " escaped.
        let quoted = key.replace('\\', "\\\\").replace('"', "\\\"");
        let mut stdin = child.stdin.take().context("curl's stdin")?;
        stdin
            .write_all(format!("header = \"X-API-Key: {quoted}\"\n").as_bytes())
            .await?;
        drop(stdin);
        let out = child.wait_with_output().await?;
        let stdout = String::from_utf8_lossy(&out.stdout);
        let (body, status) = stdout.rsplit_once('\n').unwrap_or(("", &stdout));
        if !out.status.success() {
            bail!(
                "{method} {url}: no answer ({}): {}",
                out.status,
                String::from_utf8_lossy(&out.stderr).trim()
            );
        }
        Ok(ApiAnswer {
            status: status
                .parse()
                .with_context(|| format!("{method} {url}: curl printed no status: {stdout}"))?,
            body: body.to_owned(),
        })
    }

    /// As [`Self::request_with_key`], with the server's key.
    pub async fn request(
        &self,
        method: &str,
        path: &str,
        body: Option<&Value>,
    ) -> Result<ApiAnswer> {
        self.request_with_key(self.api_key(), method, path, body)
            .await
    }

    /// The zone as the API shows it (`GET /zones/{zone}`): its `serial`, its `rrsets`...
    pub async fn zone(&self, zone: &str) -> Result<Value> {
        let path = format!("/zones/{zone}");
        let answer = self.request("GET", &path, None).await?;
        ensure!(
            answer.status == 200,
            "GET {path} answered {}: {}",
            answer.status,
            answer.body
        );
        answer.json()
    }

    /// The zone's SOA serial; the API raises it on every change it makes.
    pub async fn serial(&self, zone: &str) -> Result<u64> {
        let zone_json = self.zone(zone).await?;
        zone_json["serial"]
            .as_u64()
            .with_context(|| format!("zone {zone} has no serial: {zone_json}"))
    }

    /// The contents of the `name` `rrtype` rrset of `zone`, sorted, as the API returns them;
    /// `None` if the zone has no such rrset. Disabled records are left out (DNS does not
    /// serve them).
    pub async fn rrset(&self, zone: &str, name: &str, rrtype: &str) -> Result<Option<Vec<String>>> {
        Ok(self.find_rrset(zone, name, rrtype).await?.map(|rrset| {
            let mut contents: Vec<String> = rrset["records"]
                .as_array()
                .into_iter()
                .flatten()
                .filter(|record| record["disabled"] != true)
                .filter_map(|record| record["content"].as_str().map(str::to_owned))
                .collect();
            contents.sort();
            contents
        }))
    }

    /// The TTL of the `name` `rrtype` rrset of `zone`, if there is one.
    pub async fn rrset_ttl(&self, zone: &str, name: &str, rrtype: &str) -> Result<Option<u64>> {
        Ok(self
            .find_rrset(zone, name, rrtype)
            .await?
            .and_then(|rrset| rrset["ttl"].as_u64()))
    }

    async fn find_rrset(&self, zone: &str, name: &str, rrtype: &str) -> Result<Option<Value>> {
        let mut zone_json = self.zone(zone).await?;
        let rrsets = zone_json["rrsets"].take();
        let Value::Array(rrsets) = rrsets else {
            bail!("zone {zone} has no rrsets array: {zone_json}");
        };
        // The API lowercases names; types are upper case.
        Ok(rrsets.into_iter().find(|rrset| {
            rrset["name"]
                .as_str()
                .is_some_and(|n| n.eq_ignore_ascii_case(name))
                && rrset["type"] == rrtype
        }))
    }

    /// Replaces the `name` `rrtype` rrset of `zone` with `contents` (zone-file form), as
    /// anyone with the key could behind a controller's back.
    pub async fn set_rrset(
        &self,
        zone: &str,
        name: &str,
        rrtype: &str,
        ttl: u32,
        contents: &[&str],
    ) -> Result<()> {
        let records: Vec<Value> = contents
            .iter()
            .map(|content| json!({"content": content, "disabled": false}))
            .collect();
        self.patch(
            zone,
            json!({"name": name, "type": rrtype, "ttl": ttl, "changetype": "REPLACE", "records": records}),
        )
        .await
    }

    /// Deletes the `name` `rrtype` rrset of `zone`; deleting one that does not exist succeeds.
    pub async fn delete_rrset(&self, zone: &str, name: &str, rrtype: &str) -> Result<()> {
        self.patch(
            zone,
            json!({"name": name, "type": rrtype, "changetype": "DELETE"}),
        )
        .await
    }

    async fn patch(&self, zone: &str, rrset: Value) -> Result<()> {
        let path = format!("/zones/{zone}");
        let answer = self
            .request("PATCH", &path, Some(&json!({"rrsets": [rrset]})))
            .await?;
        ensure!(
            answer.status == 204,
            "PATCH {path} with {rrset} answered {}: {}",
            answer.status,
            answer.body
        );
        Ok(())
    }

    /// What DNS answers for `name` `rrtype` (`dig +short`), sorted: empty for a name or type
    /// the zone lacks. Fails when no answer comes (the server is down).
    pub async fn dig(&self, name: &str, rrtype: &str) -> Result<Vec<String>> {
        let out = tokio::process::Command::new("dig")
            .arg(format!("@{}", self.dns_addr().ip()))
            .args(["-p", &self.dns_addr().port().to_string()])
            .args(["+short", "+tries=1", "+time=2", name, rrtype])
            .kill_on_drop(true)
            .output()
            .await
            .context("running dig (Debian package bind9-dnsutils)")?;
        let stdout = String::from_utf8_lossy(&out.stdout);
        if !out.status.success() {
            bail!(
                "dig {name} {rrtype} at {} got no answer ({}): {}{}",
                self.dns_addr(),
                out.status,
                stdout.trim(),
                String::from_utf8_lossy(&out.stderr).trim()
            );
        }
        let mut lines: Vec<String> = stdout.lines().map(str::to_owned).collect();
        lines.sort();
        Ok(lines)
    }

    /// Stops the server (`pdns down`, SIGTERM): the API and DNS refuse connections until
    /// [`Self::start_again`]. The database and key stay.
    pub async fn stop(&self) -> Result<()> {
        run_script(&pdns_script(), ["down".as_ref(), self.dir.as_os_str()]).await?;
        Ok(())
    }

    /// Starts the stopped server again with the same database and key, and waits until it
    /// answers. Fails if it could not have its ports back (another process took one).
    pub async fn start_again(&self) -> Result<()> {
        up(&self.dir).await?;
        let now = Endpoints::read(&self.dir)?;
        ensure!(
            now == self.endpoints,
            "PowerDNS in {} came back otherwise: {now:?} instead of {:?} (something took a port?)",
            self.dir.display(),
            self.endpoints
        );
        Ok(())
    }
}

impl Endpoints {
    fn read(dir: &Path) -> Result<Self> {
        let endpoints_file = dir.join("endpoints");
        let endpoints = std::fs::read_to_string(&endpoints_file)
            .with_context(|| format!("reading {}", endpoints_file.display()))?;
        let value = |key: &str| {
            endpoints
                .lines()
                .find_map(|line| line.strip_prefix(key)?.strip_prefix('='))
                .with_context(|| format!("{} has no {key}=", endpoints_file.display()))
        };
        let api_url = value("api")?.to_owned();
        let dns_addr = value("dns")?
            .parse()
            .with_context(|| format!("{}: dns= is not HOST:PORT", endpoints_file.display()))?;
        let key_file = value("key-file")?;
        let api_key = std::fs::read_to_string(key_file)
            .with_context(|| format!("reading the API key {key_file}"))?
            .trim()
            .to_owned();
        Ok(Self {
            api_url,
            api_key,
            dns_addr,
        })
    }
}

async fn up(dir: &Path) -> Result<()> {
    let pid = std::process::id().to_string();
    run_script(
        &pdns_script(),
        [
            "up".as_ref(),
            dir.as_os_str(),
            "--exit-with".as_ref(),
            pid.as_ref(),
        ],
    )
    .await?;
    Ok(())
}

impl Drop for PowerDns {
    fn drop(&mut self) {
        // Blocking is fine in a test process; the watchdog would do it anyway once the process
        // exits.
        let result = std::process::Command::new(pdns_script())
            .arg("down")
            .arg(&self.dir)
            .arg("--purge")
            .output();
        match result {
            Ok(out) if out.status.success() => {}
            Ok(out) => eprintln!(
                "pdns down {} --purge failed: {}",
                self.dir.display(),
                String::from_utf8_lossy(&out.stderr)
            ),
            Err(e) => eprintln!(
                "could not run pdns down {} --purge: {e}",
                self.dir.display()
            ),
        }
    }
}
