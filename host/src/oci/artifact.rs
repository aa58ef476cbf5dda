//! The CNCF TAG-Runtime layout of a Wasm component as an OCI artifact, written by `push` and
//! checked on every pull.

use std::fmt::Write;

use oci_client::manifest::{OCI_IMAGE_MEDIA_TYPE, OciDescriptor, OciImageManifest};
use serde_json::json;
use sha2::{Digest, Sha256};

/// The layer media type this host pushes.
pub const WASM_LAYER: &str = "application/wasm";
/// The config media type this host pushes.
pub const WASM_CONFIG: &str = "application/vnd.wasm.config.v0+json";
/// What Kubewarden and Spin push: accepted on pulls, never written.
const OLD_WASM_CONFIG: &str = oci_client::manifest::WASM_CONFIG_MEDIA_TYPE;
const OLD_WASM_LAYER: &str = oci_client::manifest::WASM_LAYER_MEDIA_TYPE;

pub(super) fn sha256_digest(bytes: &[u8]) -> String {
    let hash = Sha256::digest(bytes);
    let mut out = String::with_capacity(71);
    out.push_str("sha256:");
    for byte in hash {
        let _ = write!(out, "{byte:02x}");
    }
    out
}

/// A component's top-level imports and exports, as the config lists them.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ComponentInterfaces {
    pub(crate) imports: Vec<String>,
    pub(crate) exports: Vec<String>,
}

/// The top-level imports and exports of a component, read from its sections (no compile).
pub fn component_interfaces(bytes: &[u8]) -> Result<ComponentInterfaces, ArtifactError> {
    use wasmparser::{Parser, Payload};
    let mut interfaces = ComponentInterfaces::default();
    let mut depth = 0usize;
    for payload in Parser::new(0).parse_all(bytes) {
        match payload? {
            Payload::Version { encoding, .. } => {
                if depth == 0 && encoding != wasmparser::Encoding::Component {
                    return Err(ArtifactError::CoreModule);
                }
                depth += 1;
            }
            Payload::End(_) => depth = depth.saturating_sub(1),
            Payload::ComponentImportSection(reader) if depth == 1 => {
                for import in reader {
                    interfaces.imports.push(import?.name.name.to_owned());
                }
            }
            Payload::ComponentExportSection(reader) if depth == 1 => {
                for export in reader {
                    interfaces.exports.push(export?.name.name.to_owned());
                }
            }
            _ => {}
        }
    }
    Ok(interfaces)
}

/// The config blob: what the layout asks for, and the component's interfaces.
pub(super) fn config(layer_digest: &str, interfaces: &ComponentInterfaces) -> Vec<u8> {
    let created = humantime::format_rfc3339_seconds(std::time::SystemTime::now()).to_string();
    let config = json!({
        "created": created,
        "architecture": "wasm",
        "os": "wasip2",
        "layerDigests": [layer_digest],
        "component": {
            "imports": interfaces.imports,
            "exports": interfaces.exports,
        },
    });
    serde_json::to_vec(&config).unwrap_or_default()
}

/// The image manifest: the config and exactly one `application/wasm` layer.
/// The layer carries `org.opencontainers.image.title` (`title`, a file name): `oras pull` writes
/// only titled layers, under that name.
pub(super) fn manifest(config: (&str, usize), layer: (&str, usize), title: &str) -> Vec<u8> {
    let manifest = json!({
        "schemaVersion": 2,
        "mediaType": OCI_IMAGE_MEDIA_TYPE,
        "artifactType": WASM_CONFIG,
        "config": {"mediaType": WASM_CONFIG, "digest": config.0, "size": config.1},
        "layers": [{"mediaType": WASM_LAYER, "digest": layer.0, "size": layer.1,
            "annotations": {"org.opencontainers.image.title": title}}],
    });
    serde_json::to_vec(&manifest).unwrap_or_default()
}

/// The descriptors a pull follows.
pub(super) struct Parts {
    pub(crate) config: OciDescriptor,
    pub(crate) layer: OciDescriptor,
}

/// A manifest is a Wasm artifact: a Wasm config and exactly one Wasm layer.
pub(super) fn parse_manifest(raw: &[u8]) -> Result<Parts, ArtifactError> {
    let manifest: OciImageManifest =
        serde_json::from_slice(raw).map_err(ArtifactError::Manifest)?;
    let config = manifest.config;
    if config.media_type != WASM_CONFIG && config.media_type != OLD_WASM_CONFIG {
        return Err(ArtifactError::ConfigType(config.media_type));
    }
    let [layer]: [OciDescriptor; 1] = manifest
        .layers
        .try_into()
        .map_err(|layers: Vec<_>| ArtifactError::Layers(layers.len()))?;
    if layer.media_type != WASM_LAYER && layer.media_type != OLD_WASM_LAYER {
        return Err(ArtifactError::LayerType(layer.media_type));
    }
    Ok(Parts { config, layer })
}

/// A v0 config lists the layer it describes; an older config need not.
pub(super) fn check_config(raw: &[u8], layer_digest: &str) -> Result<(), ArtifactError> {
    let config: serde_json::Value = serde_json::from_slice(raw).map_err(ArtifactError::Config)?;
    if let Some(digests) = config.get("layerDigests").and_then(|d| d.as_array())
        && !digests.iter().any(|d| d.as_str() == Some(layer_digest))
    {
        return Err(ArtifactError::Unlisted(layer_digest.to_owned()));
    }
    Ok(())
}

/// Why bytes are not a Wasm component artifact in the layout above.
#[derive(Debug, thiserror::Error)]
pub enum ArtifactError {
    #[error("the manifest does not parse: {0}")]
    Manifest(serde_json::Error),
    #[error("config media type {0} (expected {WASM_CONFIG})")]
    ConfigType(String),
    #[error("{0} layers (a Wasm artifact has exactly one)")]
    Layers(usize),
    #[error("layer media type {0} (expected {WASM_LAYER})")]
    LayerType(String),
    #[error("the config does not parse: {0}")]
    Config(serde_json::Error),
    #[error("the config's layerDigests do not list the layer {0}")]
    Unlisted(String),
    #[error(
        "the layer is not a WebAssembly component (a core module, or other bytes: its first eight bytes are not a component's preamble)"
    )]
    NotAComponent,
    #[error("a core module, not a component")]
    CoreModule,
    #[error(transparent)]
    Sections(#[from] wasmparser::BinaryReaderError),
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_pushed_manifest_parses_back_to_its_config_and_one_wasm_layer() {
        let layer = sha256_digest(b"component");
        let config = config(&layer, &ComponentInterfaces::default());
        let config_digest = sha256_digest(&config);
        let raw = manifest((&config_digest, config.len()), (&layer, 9), "module.wasm");
        let parts = parse_manifest(&raw).unwrap();
        assert_eq!(
            (parts.config.digest.as_str(), parts.layer.digest.as_str()),
            (config_digest.as_str(), layer.as_str())
        );
        assert_eq!(parts.layer.size, 9);
        check_config(&config, &layer).unwrap();
        assert!(check_config(&config, &sha256_digest(b"other")).is_err());
        let value: serde_json::Value = serde_json::from_slice(&config).unwrap();
        assert_eq!(
            (value["architecture"].as_str(), value["os"].as_str()),
            (Some("wasm"), Some("wasip2"))
        );
    }

    #[test]
    fn a_manifest_with_another_layer_type_or_count_is_not_a_wasm_artifact() {
        let layer =
            |media: &str| json!({"mediaType": media, "digest": sha256_digest(b"x"), "size": 1});
        let doc = |layers: serde_json::Value| {
            serde_json::to_vec(&json!({
                "schemaVersion": 2,
                "config": {"mediaType": WASM_CONFIG, "digest": sha256_digest(b"c"), "size": 1},
                "layers": layers,
            }))
            .unwrap()
        };
        let tar = parse_manifest(&doc(json!([layer(
            "application/vnd.oci.image.layer.v1.tar"
        )])));
        assert!(
            tar.err()
                .unwrap()
                .to_string()
                .starts_with("layer media type application/vnd.oci.image.layer.v1.tar")
        );
        let two = parse_manifest(&doc(json!([layer(WASM_LAYER), layer(WASM_LAYER)])));
        assert_eq!(
            two.err().unwrap().to_string(),
            "2 layers (a Wasm artifact has exactly one)"
        );
        assert!(parse_manifest(&doc(json!([layer(OLD_WASM_LAYER)]))).is_ok());
    }
}
