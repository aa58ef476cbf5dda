//! The PowerDNS `tools/pdns/pdns` starts behaves as a DNSRecord controller's tests need: what
//! is set through its REST API is what DNS answers, at once, and a deleted record set is no
//! longer served; the API refuses a wrong key; a stopped server refuses connections and comes
//! back on the same ports with its records. And the DNSRecord CRD
//! (`examples/crds/dnsrecord.yaml`) makes the real kube-apiserver refuse what PowerDNS would,
//! accept the examples, and print the Ready condition.

use anyhow::{Context, Result, bail, ensure};
use kube::api::{Api, DynamicObject, Patch, PatchParams, PostParams};
use kube::core::{ApiResource, GroupVersionKind};
use reconciler_host_tests::pdns::PowerDns;
use reconciler_host_tests::{ControlPlane, apply_crd_file, apply_file, test_namespace};
use serde_json::{Value, json};

const ZONE: &str = "example.test.";

#[tokio::test]
async fn an_rrset_set_through_the_api_is_what_dig_answers_and_a_deleted_one_is_not_served()
-> Result<()> {
    let pdns = PowerDns::private("set-dig-delete").await?;
    pdns.create_zone(ZONE).await?;
    let www = "www.example.test.";
    assert_eq!(
        pdns.rrset(ZONE, www, "A").await?,
        None,
        "a fresh zone has {www} A"
    );
    assert_eq!(pdns.dig(www, "A").await?, Vec::<String>::new());
    let before = pdns.serial(ZONE).await?;

    pdns.set_rrset(ZONE, www, "A", 120, &["192.0.2.2", "192.0.2.1"])
        .await?;
    assert_eq!(
        pdns.rrset(ZONE, www, "A").await?,
        Some(vec!["192.0.2.1".to_owned(), "192.0.2.2".to_owned()])
    );
    assert_eq!(pdns.rrset_ttl(ZONE, www, "A").await?, Some(120));
    assert_eq!(pdns.dig(www, "A").await?, ["192.0.2.1", "192.0.2.2"]);
    // dig takes a name as absolute with or without the final dot (no search list).
    assert_eq!(
        pdns.dig("www.example.test", "A").await?,
        ["192.0.2.1", "192.0.2.2"]
    );
    let after = pdns.serial(ZONE).await?;
    assert!(
        after > before,
        "the SOA serial stayed {before} -> {after} across a change"
    );

    // TXT contents are quoted in the API and in dig's answer alike.
    pdns.set_rrset(ZONE, "txt.example.test.", "TXT", 300, &["\"hello world\""])
        .await?;
    assert_eq!(
        pdns.dig("txt.example.test.", "TXT").await?,
        ["\"hello world\""]
    );

    pdns.delete_rrset(ZONE, www, "A").await?;
    assert_eq!(pdns.rrset(ZONE, www, "A").await?, None);
    assert_eq!(
        pdns.dig(www, "A").await?,
        Vec::<String>::new(),
        "{www} A is still served after its deletion"
    );
    // The other record set is untouched.
    assert_eq!(
        pdns.rrset(ZONE, "txt.example.test.", "TXT").await?,
        Some(vec!["\"hello world\"".to_owned()])
    );
    Ok(())
}

#[tokio::test]
async fn the_api_refuses_a_wrong_or_missing_key_with_401() -> Result<()> {
    let pdns = PowerDns::private("wrong-key").await?;
    let right = pdns.request("GET", "", None).await?;
    assert_eq!(right.status, 200, "with the key: {}", right.body);
    assert_eq!(right.json()?["id"], "localhost", "{}", right.body);
    for key in ["not-the-key", ""] {
        let refused = pdns.request_with_key(key, "GET", "/zones", None).await?;
        assert_eq!(
            refused.status, 401,
            "GET /zones with key {key:?}: {}",
            refused.body
        );
    }
    let refused = pdns
        .request_with_key(
            "not-the-key",
            "POST",
            "/zones",
            Some(&json!({"name": "stolen.test.", "kind": "Native", "nameservers": []})),
        )
        .await?;
    assert_eq!(refused.status, 401, "POST /zones: {}", refused.body);
    let zones = pdns.request("GET", "/zones", None).await?.json()?;
    assert_eq!(zones, json!([]), "a refused request created a zone");
    Ok(())
}

#[tokio::test]
async fn a_stopped_server_refuses_connections_and_keeps_its_records_across_a_restart() -> Result<()>
{
    let pdns = PowerDns::private("restart").await?;
    pdns.create_zone(ZONE).await?;
    let name = "kept.example.test.";
    pdns.set_rrset(ZONE, name, "A", 300, &["192.0.2.7"]).await?;
    let api_url = pdns.api_url().to_owned();

    pdns.stop().await?;
    match pdns.request("GET", "", None).await {
        Err(e) => ensure!(
            format!("{e:#}").contains("Couldn't connect"),
            "the stopped API failed otherwise than by refusing: {e:#}"
        ),
        Ok(answer) => bail!("the stopped server's API answered {}", answer.status),
    }
    ensure!(
        pdns.dig(name, "A").await.is_err(),
        "the stopped server still answers DNS"
    );

    pdns.start_again().await?;
    assert_eq!(pdns.api_url(), api_url);
    assert_eq!(
        pdns.rrset(ZONE, name, "A").await?,
        Some(vec!["192.0.2.7".to_owned()]),
        "the record set after the restart"
    );
    assert_eq!(pdns.dig(name, "A").await?, ["192.0.2.7"]);
    Ok(())
}

#[tokio::test]
async fn creating_a_zone_again_leaves_it_and_its_records_as_they_were() -> Result<()> {
    let pdns = PowerDns::private("zone-twice").await?;
    pdns.create_zone(ZONE).await?;
    assert_eq!(
        pdns.dig(ZONE, "NS").await?,
        ["ns1.example.test."],
        "the new zone's NS"
    );
    pdns.set_rrset(ZONE, "a.example.test.", "A", 300, &["192.0.2.1"])
        .await?;
    let serial = pdns.serial(ZONE).await?;
    pdns.create_zone(ZONE).await?;
    assert_eq!(pdns.serial(ZONE).await?, serial);
    assert_eq!(pdns.dig("a.example.test.", "A").await?, ["192.0.2.1"]);
    Ok(())
}

// ---------------------------------------------------------------------------------------------
// The DNSRecord CRD on the real kube-apiserver

const CRD: &str = "examples/crds/dnsrecord.yaml";

fn dns_record_resource() -> ApiResource {
    ApiResource::from_gvk(&GroupVersionKind::gvk(
        "dns.reconciler.dev",
        "v1alpha1",
        "DNSRecord",
    ))
}

fn dns_record(name: &str, spec: Value) -> Result<DynamicObject> {
    Ok(serde_json::from_value(json!({
        "apiVersion": "dns.reconciler.dev/v1alpha1",
        "kind": "DNSRecord",
        "metadata": {"name": name},
        "spec": spec,
    }))?)
}

async fn dns_records(prefix: &str) -> Result<(kube::Client, Api<DynamicObject>)> {
    let client = ControlPlane::shared().await?.client().await?;
    apply_crd_file(&client, CRD).await?;
    let ns = test_namespace(&client, prefix).await?;
    let api = Api::namespaced_with(client.clone(), &ns, &dns_record_resource());
    Ok((client, api))
}

/// Creating `spec` must fail with 422 and a message holding `expected`.
async fn refused(api: &Api<DynamicObject>, name: &str, spec: Value, expected: &str) -> Result<()> {
    let shown = spec.to_string();
    match api
        .create(&PostParams::default(), &dns_record(name, spec)?)
        .await
    {
        Ok(_) => bail!("DNSRecord {name} ({shown}) was accepted"),
        Err(kube::Error::Api(status)) => {
            ensure!(
                status.code == 422 && status.message.contains(expected),
                "{name}: expected 422 with {expected:?}, got {} {:?}",
                status.code,
                status.message
            );
            Ok(())
        }
        Err(e) => bail!("creating DNSRecord {name} failed in an unexpected way: {e}"),
    }
}

#[tokio::test]
async fn the_api_server_refuses_invalid_dns_records_and_accepts_valid_ones() -> Result<()> {
    let (_, api) = dns_records("dnsrecord-rules").await?;
    let spec = |name: &str, rrtype: &str, contents: Value| json!({"zone": ZONE, "name": name, "type": rrtype, "contents": contents});
    let www = "www.example.test.";
    let cases = [
        (
            "bad-type",
            spec(www, "PTR", json!(["x.example.test."])),
            "Unsupported value: \"PTR\"",
        ),
        (
            "outside-zone",
            spec("www.other.test.", "A", json!(["192.0.2.1"])),
            "spec.name must be inside spec.zone",
        ),
        // Ends with the zone's text but is not inside it.
        (
            "suffix-only",
            spec("notexample.test.", "A", json!(["192.0.2.1"])),
            "spec.name must be inside spec.zone",
        ),
        (
            "no-contents",
            spec(www, "A", json!([])),
            "spec.contents: Invalid value",
        ),
        (
            "relative-name",
            spec("www", "A", json!(["192.0.2.1"])),
            "spec.name must be absolute",
        ),
        (
            "relative-zone",
            json!({"zone": "example.test", "name": www, "type": "A", "contents": ["192.0.2.1"]}),
            "spec.zone must be absolute",
        ),
        (
            "upper-case",
            spec("WWW.example.test.", "A", json!(["192.0.2.1"])),
            "spec.name must be a lower-case domain name",
        ),
        (
            "zero-ttl",
            json!({"zone": ZONE, "name": www, "type": "A", "ttl": 0, "contents": ["192.0.2.1"]}),
            "spec.ttl: Invalid value",
        ),
        (
            "a-not-ipv4",
            spec(www, "A", json!(["2001:db8::1"])),
            "an A record's contents must be IPv4 addresses",
        ),
        // PowerDNS refuses it too ("Not in expected format").
        (
            "a-leading-zero",
            spec(www, "A", json!(["192.0.2.01"])),
            "an A record's contents must be IPv4 addresses",
        ),
        (
            "aaaa-not-canonical",
            spec(www, "AAAA", json!(["2001:DB8:0:0::1"])),
            "an AAAA record's contents must be IPv6 addresses",
        ),
        (
            "txt-unquoted",
            spec(www, "TXT", json!(["hello"])),
            "a TXT record's contents must be quoted",
        ),
        (
            "cname-relative",
            spec(www, "CNAME", json!(["target"])),
            "target must be absolute",
        ),
        (
            "cname-apex",
            spec(ZONE, "CNAME", json!(["target.example.test."])),
            "cannot be at the zone's apex",
        ),
        (
            "duplicate",
            spec(www, "A", json!(["192.0.2.1", "192.0.2.1"])),
            "Duplicate value",
        ),
    ];
    for (name, spec, expected) in cases {
        refused(&api, name, spec, expected).await?;
    }

    // The rules accept what they should, so the refusals above are not blanket ones.
    for (name, spec) in [
        ("a", spec(www, "A", json!(["192.0.2.1", "192.0.2.2"]))),
        ("aaaa", spec(www, "AAAA", json!(["2001:db8::1"]))),
        ("apex-txt", spec(ZONE, "TXT", json!(["\"v=spf1 -all\""]))),
        ("cname", spec("alias.example.test.", "CNAME", json!([www]))),
        ("mx", spec(ZONE, "MX", json!(["10 mail.example.test."]))),
        (
            "srv",
            spec(
                "_sip._tcp.example.test.",
                "SRV",
                json!(["10 5 5060 sip.example.test."]),
            ),
        ),
        (
            "wildcard",
            spec("*.example.test.", "A", json!(["192.0.2.3"])),
        ),
    ] {
        api.create(&PostParams::default(), &dns_record(name, spec)?)
            .await
            .with_context(|| format!("the valid DNSRecord {name} was refused"))?;
    }
    Ok(())
}

#[tokio::test]
async fn a_dns_records_zone_name_and_type_cannot_change_but_its_contents_can() -> Result<()> {
    let (_, api) = dns_records("dnsrecord-immutable").await?;
    api.create(
        &PostParams::default(),
        &dns_record(
            "www",
            json!({"zone": ZONE, "name": "www.example.test.", "type": "A", "contents": ["192.0.2.1"]}),
        )?,
    )
    .await?;
    for (field, value) in [
        ("name", "web.example.test."),
        ("type", "AAAA"),
        ("zone", "test."),
    ] {
        let patch = json!({"spec": {field: value}});
        match api
            .patch("www", &PatchParams::default(), &Patch::Merge(&patch))
            .await
        {
            Ok(_) => bail!("spec.{field} changed to {value}"),
            Err(kube::Error::Api(status)) => ensure!(
                status.code == 422
                    && status
                        .message
                        .contains(&format!("spec.{field} cannot change")),
                "changing spec.{field}: {} {:?}",
                status.code,
                status.message
            ),
            Err(e) => bail!("changing spec.{field} failed in an unexpected way: {e}"),
        }
    }
    let patch = json!({"spec": {"ttl": 60, "contents": ["192.0.2.9"]}});
    let changed = api
        .patch("www", &PatchParams::default(), &Patch::Merge(&patch))
        .await
        .context("changing spec.ttl and spec.contents")?;
    assert_eq!(changed.data["spec"]["ttl"], 60);
    assert_eq!(changed.data["spec"]["contents"], json!(["192.0.2.9"]));
    Ok(())
}

#[tokio::test]
async fn the_example_dns_records_apply_with_the_default_ttl() -> Result<()> {
    let (client, _) = dns_records("dnsrecord-examples").await?;
    // The examples name namespace `default`; applying them again is a no-op.
    let applied = apply_file(&client, "examples/dnsrecords.yaml", None).await?;
    let names: Vec<_> = applied
        .iter()
        .map(|o| o.metadata.name.clone().unwrap_or_default())
        .collect();
    assert_eq!(names, ["www", "api", "spf"]);
    // www names no ttl: the schema's default is stored.
    assert_eq!(applied[0].data["spec"]["ttl"], 300, "{:?}", applied[0].data);
    assert_eq!(applied[1].data["spec"]["ttl"], 60);
    Ok(())
}

#[tokio::test]
async fn the_printer_columns_show_the_record_and_the_ready_condition() -> Result<()> {
    let (client, api) = dns_records("dnsrecord-columns").await?;
    let created = api
        .create(
            &PostParams::default(),
            &dns_record(
                "www",
                json!({"zone": ZONE, "name": "www.example.test.", "type": "A", "contents": ["192.0.2.1"]}),
            )?,
        )
        .await?;
    let status = json!({"status": {
        "observedGeneration": created.metadata.generation,
        "records": ["192.0.2.1"],
        "serial": 2_026_112_701,
        "conditions": [{
            "type": "Ready", "status": "True", "reason": "Served",
            "message": "PowerDNS serves the record set",
            "lastTransitionTime": "2026-11-27T12:00:00Z",
        }],
    }});
    api.patch_status("www", &PatchParams::default(), &Patch::Merge(&status))
        .await
        .context("writing the status through the status subresource")?;

    let ns = api_namespace(&created)?;
    let request = http::Request::get(format!(
        "/apis/dns.reconciler.dev/v1alpha1/namespaces/{ns}/dnsrecords/www"
    ))
    .header(
        http::header::ACCEPT,
        "application/json;as=Table;v=v1;g=meta.k8s.io",
    )
    .body(Vec::new())?;
    let table: Value = serde_json::from_str(&client.request_text(request).await?)?;
    let columns: Vec<&str> = table["columnDefinitions"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|c| c["name"].as_str())
        .collect();
    assert_eq!(
        columns,
        ["Name", "Zone", "Record", "Type", "TTL", "Ready", "Age"]
    );
    let cells = &table["rows"][0]["cells"];
    assert_eq!(
        cells.as_array().map(|c| c[..6].to_vec()),
        Some(vec![
            json!("www"),
            json!(ZONE),
            json!("www.example.test."),
            json!("A"),
            json!(300),
            json!("True"),
        ]),
        "{table}"
    );
    Ok(())
}

fn api_namespace(object: &DynamicObject) -> Result<String> {
    object
        .metadata
        .namespace
        .clone()
        .context("the created DNSRecord has no namespace")
}
