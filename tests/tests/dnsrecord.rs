//! The DNSRecord guest (`guests/python/dnsrecord`, Python on the SDK's `http`) end to end: a
//! real kube-apiserver, a real PowerDNS (`tools/pdns/pdns`), and the host between them serving
//! `wasi:http` under a grant. What PowerDNS serves is read with `dig`; what the guest reports,
//! from the API server.
//!
//! The grant lets the guest GET and PATCH under the server's API URL and nothing else; the API
//! key lives in a Secret in the host's namespace (`run --namespace`), and the host adds it as
//! `X-API-Key`: it must never show in the host's output or in an object's status.

use std::collections::BTreeMap;
use std::time::Duration;

use anyhow::{Result, bail, ensure};
use k8s_openapi::api::core::v1::Secret;
use kube::api::{Api, DeleteParams, DynamicObject, ObjectMeta, Patch, PatchParams, PostParams};
use kube::core::{ApiResource, GroupVersionKind};
use reconciler_host_tests::pdns::PowerDns;
use reconciler_host_tests::{
    ControlPlane, HostOptions, HostProcess, apply_crd_file, test_namespace, wait_until,
};
use serde_json::{Value, json};

const ZONE: &str = "example.test.";
/// The build of the guest (`guests/build.sh` writes `dnsrecord-python.wasm`); it runs as
/// `dnsrecord.wasm`, the name it declares.
const GUEST: &str = "dnsrecord-python";
/// The Secret in the host's namespace that holds the API key.
const SECRET: &str = "pdns-api";

/// The host configuration: read and finalize DNSRecords, write their status, `methods` (`GET,
/// PATCH`) under PowerDNS's server URL with the key from the Secret, and that URL in the guest's
/// environment.
fn grants(server_url: &str, methods: &str) -> String {
    format!(
        r#"
guests:
  dnsrecord:
    read: [dns.reconciler.dev/v1alpha1/DNSRecord]
    write: [dns.reconciler.dev/v1alpha1/DNSRecord, dns.reconciler.dev/v1alpha1/DNSRecord/status]
    env:
      PDNS_API: {server_url}
    http:
      - prefix: {server_url}
        methods: [{methods}]
        headers:
          X-API-Key: {{secretKeyRef: {{name: {SECRET}, key: api-key}}}}
"#
    )
}

struct Setup {
    pdns: PowerDns,
    api: Api<DynamicObject>,
    host: HostProcess,
}

async fn setup(prefix: &str, methods: &str) -> Result<Setup> {
    let cp = ControlPlane::shared().await?;
    let client = cp.client().await?;
    apply_crd_file(&client, "examples/crds/dnsrecord.yaml").await?;
    let ns = test_namespace(&client, prefix).await?;
    let pdns = PowerDns::private(prefix).await?;
    pdns.create_zone(ZONE).await?;
    let secret = Secret {
        metadata: ObjectMeta {
            name: Some(SECRET.into()),
            ..ObjectMeta::default()
        },
        string_data: Some(BTreeMap::from([(
            "api-key".to_owned(),
            pdns.api_key().to_owned(),
        )])),
        ..Secret::default()
    };
    Api::<Secret>::namespaced(client.clone(), &ns)
        .create(&PostParams::default(), &secret)
        .await?;
    let server_url = format!("{}/api/v1/servers/localhost", pdns.api_url());
    let host = HostProcess::start(HostOptions {
        kubeconfig: cp.kubeconfig(),
        config: grants(&server_url, methods),
        guests: vec![GUEST],
        namespace: Some(&ns),
        // The host's own namespace: where the grant's Secret is read.
        extra_args: vec!["--namespace".into(), ns.clone()],
    })
    .await?;
    let resource = ApiResource::from_gvk(&GroupVersionKind::gvk(
        "dns.reconciler.dev",
        "v1alpha1",
        "DNSRecord",
    ));
    Ok(Setup {
        pdns,
        api: Api::namespaced_with(client, &ns, &resource),
        host,
    })
}

impl Setup {
    async fn create(&self, name: &str, spec: Value) -> Result<()> {
        let object: DynamicObject = serde_json::from_value(json!({
            "apiVersion": "dns.reconciler.dev/v1alpha1", "kind": "DNSRecord",
            "metadata": {"name": name}, "spec": spec,
        }))?;
        self.api.create(&PostParams::default(), &object).await?;
        Ok(())
    }

    async fn patch_spec(&self, name: &str, spec: Value) -> Result<()> {
        self.api
            .patch(
                name,
                &PatchParams::default(),
                &Patch::Merge(json!({ "spec": spec })),
            )
            .await?;
        Ok(())
    }

    /// Waits until the API server shows Ready=`status` with `reason` for the object's current
    /// generation; the object.
    async fn wait_ready(&self, name: &str, status: &str, reason: &str) -> Result<DynamicObject> {
        wait_until(
            &format!("{name} Ready={status} ({reason})"),
            Duration::from_secs(90),
            || async {
                let object = self.api.get(name).await?;
                let generation = object.metadata.generation;
                let observed = object.data["status"]["observedGeneration"].as_i64();
                let ready = ready(&object);
                match &ready {
                    Some((s, r, _)) if s == status && r == reason && observed == generation => {
                        Ok(object)
                    }
                    _ => bail!(
                        "Ready is {ready:?}, observedGeneration {observed:?} of {generation:?}"
                    ),
                }
            },
        )
        .await
        .map_err(|e| e.context(self.host.log_tail()))
    }

    /// Waits until DNS answers `name` A with `expected` (sorted).
    async fn wait_dig(&self, name: &str, expected: &[&str], timeout: Duration) -> Result<()> {
        wait_until(
            &format!("dig {name} A answering {expected:?}"),
            timeout,
            || async {
                let answer = self.pdns.dig(name, "A").await?;
                ensure!(answer == expected, "dig answers {answer:?}");
                Ok(())
            },
        )
        .await
        .map_err(|e| e.context(self.host.log_tail()))
    }

    async fn metric(&self, result: &str) -> Result<f64> {
        self.host
            .metric(&format!(
                "reconciler_reconcile_total{{guest=\"dnsrecord\",result=\"{result}\"}}"
            ))
            .await
    }

    /// The API key is nowhere the guest or an operator reading the host's output would see it.
    fn assert_key_not_shown(&self, objects: &[DynamicObject]) {
        let key = self.pdns.api_key();
        assert!(!key.is_empty());
        assert!(
            !self.host.log().contains(key),
            "the API key is in the host's stdout/stderr"
        );
        for object in objects {
            let status = object.data["status"].to_string();
            assert!(
                !status.contains(key),
                "the API key is in a status: {status}"
            );
        }
    }
}

/// Ready's status, reason and message.
fn ready(object: &DynamicObject) -> Option<(String, String, String)> {
    let conditions = object.data["status"]["conditions"].as_array()?;
    let ready = conditions.iter().find(|c| c["type"] == "Ready")?;
    Some((
        ready["status"].as_str()?.to_owned(),
        ready["reason"].as_str()?.to_owned(),
        ready["message"].as_str().unwrap_or_default().to_owned(),
    ))
}

#[tokio::test]
async fn a_record_is_served_updated_repaired_survives_an_outage_and_is_deleted() -> Result<()> {
    let s = setup("dnsrecord-lifecycle", "GET, PATCH").await?;
    let www = "www.example.test.";
    s.create(
        "www",
        json!({"zone": ZONE, "name": www, "type": "A", "ttl": 120,
               "contents": ["192.0.2.11", "192.0.2.10"]}),
    )
    .await?;
    let created = s.wait_ready("www", "True", "Synced").await?;
    assert_eq!(
        s.pdns.dig(www, "A").await?,
        ["192.0.2.10", "192.0.2.11"],
        "{}",
        s.host.log_tail()
    );
    assert_eq!(s.pdns.rrset_ttl(ZONE, www, "A").await?, Some(120));
    assert_eq!(
        created.data["status"]["records"],
        json!(["192.0.2.10", "192.0.2.11"])
    );
    assert_eq!(
        created.data["status"]["serial"].as_u64(),
        Some(s.pdns.serial(ZONE).await?),
        "status.serial is the zone's serial after the change"
    );
    let finalizers = created.metadata.finalizers.clone().unwrap_or_default();
    assert_eq!(finalizers, ["dns.reconciler.dev/cleanup"]);

    // A spec change: contents and TTL follow.
    s.patch_spec("www", json!({"ttl": 60, "contents": ["192.0.2.12"]}))
        .await?;
    let updated = s.wait_ready("www", "True", "Synced").await?;
    assert_eq!(updated.metadata.generation, Some(2));
    s.wait_dig(www, &["192.0.2.12"], Duration::from_secs(10))
        .await?;
    assert_eq!(s.pdns.rrset_ttl(ZONE, www, "A").await?, Some(60));

    // A change behind the controller's back, through PowerDNS's API: the resync (30 s)
    // puts the spec back.
    s.pdns
        .set_rrset(ZONE, www, "A", 60, &["203.0.113.66"])
        .await?;
    assert_eq!(s.pdns.dig(www, "A").await?, ["203.0.113.66"]);
    s.wait_dig(www, &["192.0.2.12"], Duration::from_secs(75))
        .await?;

    // PowerDNS down: a spec change cannot land; Ready=False says why, and the reconcile is
    // retried (transient) rather than given up.
    s.pdns.stop().await?;
    let errors_before = s.metric("error").await?;
    s.patch_spec("www", json!({"contents": ["192.0.2.12", "192.0.2.13"]}))
        .await?;
    let down = s.wait_ready("www", "False", "PowerDNSUnavailable").await?;
    let (_, _, message) = ready(&down).unwrap_or_default();
    assert!(
        message.contains("connection-refused") && message.contains("/zones/example.test."),
        "the message says what failed: {message}"
    );
    assert!(
        s.metric("error").await? > errors_before,
        "a transient error was counted"
    );
    assert_eq!(s.metric("permanent_error").await?, 0.0);

    // Back up: the change made while it was down lands, nothing lost.
    s.pdns.start_again().await?;
    let back = s.wait_ready("www", "True", "Synced").await?;
    assert_eq!(back.metadata.generation, Some(3));
    s.wait_dig(www, &["192.0.2.12", "192.0.2.13"], Duration::from_secs(10))
        .await?;

    // Delete: the record set goes first, then the finalizer, then the object.
    s.api.delete("www", &DeleteParams::default()).await?;
    wait_until("www gone", Duration::from_secs(60), || async {
        ensure!(s.api.get_opt("www").await?.is_none(), "still there");
        Ok(())
    })
    .await
    .map_err(|e| e.context(s.host.log_tail()))?;
    assert_eq!(s.pdns.dig(www, "A").await?, Vec::<String>::new());
    assert_eq!(s.pdns.rrset(ZONE, www, "A").await?, None);

    s.assert_key_not_shown(&[created, updated, down, back]);
    Ok(())
}

#[tokio::test]
async fn content_powerdns_rejects_is_not_ready_and_not_retried_until_the_spec_changes() -> Result<()>
{
    let s = setup("dnsrecord-rejected", "GET, PATCH").await?;
    let mx = "mx.example.test.";
    // The CRD's rules accept an absolute target; PowerDNS wants a priority before it (422).
    s.create(
        "mx",
        json!({"zone": ZONE, "name": mx, "type": "MX", "contents": ["mail.example.test."]}),
    )
    .await?;
    let rejected = s.wait_ready("mx", "False", "PowerDNSRejected").await?;
    let (_, _, message) = ready(&rejected).unwrap_or_default();
    assert!(
        message.contains("422") && message.contains("mail.example.test."),
        "the message carries PowerDNS's words: {message}"
    );
    wait_until(
        "the permanent error counted",
        Duration::from_secs(30),
        || async {
            let failed = s.metric("permanent_error").await?;
            ensure!(failed >= 1.0, "{failed}");
            Ok(())
        },
    )
    .await?;
    assert_eq!(s.pdns.rrset(ZONE, mx, "MX").await?, None);

    s.patch_spec("mx", json!({"contents": ["10 mail.example.test."]}))
        .await?;
    let fixed = s.wait_ready("mx", "True", "Synced").await?;
    assert_eq!(
        s.pdns.dig(mx, "MX").await?,
        ["10 mail.example.test."],
        "{}",
        s.host.log_tail()
    );
    s.assert_key_not_shown(&[rejected, fixed]);
    Ok(())
}

#[tokio::test]
async fn a_request_outside_the_grant_is_refused_by_the_host_and_reported_as_denied() -> Result<()> {
    // The grant lets the guest read the zone but not change it.
    let s = setup("dnsrecord-denied", "GET").await?;
    let www = "www.example.test.";
    s.create(
        "www",
        json!({"zone": ZONE, "name": www, "type": "A", "contents": ["192.0.2.10"]}),
    )
    .await?;
    let denied = s.wait_ready("www", "False", "Denied").await?;
    let (_, _, message) = ready(&denied).unwrap_or_default();
    assert!(
        message.contains("may not PATCH") && message.contains("allowed: GET"),
        "the host's refusal, naming the method and what the grant allows: {message}"
    );
    wait_until(
        "the permanent error counted",
        Duration::from_secs(30),
        || async {
            let failed = s.metric("permanent_error").await?;
            ensure!(failed >= 1.0, "{failed}");
            Ok(())
        },
    )
    .await?;
    assert_eq!(
        s.pdns.rrset(ZONE, www, "A").await?,
        None,
        "nothing was sent"
    );
    let refused = s
        .host
        .metric(r#"reconciler_http_requests_total{guest="dnsrecord",host="127.0.0.1",outcome="denied"}"#)
        .await?;
    assert!(refused >= 1.0, "{refused} refusals counted");
    s.assert_key_not_shown(&[denied]);
    Ok(())
}
