//! Test support for running reconciler-host against a real kube-apiserver + etcd.
//!
//! Newcomers start with [`ControlPlane::shared`]: it hands every test in a `cargo test` run the
//! same local control plane (built from the Go module proxy and started by
//! `tools/control-plane/cp`), and [`ControlPlane::client`] gives a `kube::Client` for it. Give
//! each test its own namespace with [`test_namespace`]; there is no kube-controller-manager, so
//! namespaces are never deleted, only abandoned.
//!
//! ```no_run
//! # async fn demo() -> anyhow::Result<()> {
//! use reconciler_host_tests::{ControlPlane, apply_crd_file, test_namespace};
//! let cp = ControlPlane::shared().await?;
//! let client = cp.client().await?;
//! apply_crd_file(&client, "examples/crds/network.yaml").await?; // waits for Established
//! let ns = test_namespace(&client, "my-test").await?;
//! # let _ = ns; Ok(()) }
//! ```
//!
//! Tests that break the control plane on purpose (restarting kube-apiserver or etcd) take a
//! [`PrivateControlPlane`] instead: only that type can restart anything, so a fault test can
//! never disturb tests in other binaries that share the common one.
//!
//! The host's live benches (`host/benches/live/`) use the same pieces, with a control plane in
//! a directory of their own ([`ControlPlane::reuse_or_start`]) and the release build of the host
//! ([`Profile::Release`]).
//!
//! The pieces, one per file:
//! - [`accounts`]: the host and tenants as ServiceAccounts bound to exactly the documented RBAC;
//! - [`api_proxy`]: an HTTP proxy in front of kube-apiserver that sheds chosen lists and watches
//!   with 429 + `Retry-After`, and logs every request with its time;
//! - [`control_plane`]: finding, starting, sharing and restarting control planes;
//! - [`cluster`]: the local single-node cluster (kubelet, containerd) for deployment tests;
//! - [`echo`]: a loopback HTTP server that reflects the API key it was sent;
//! - [`helm`]: the Helm chart, rendered or installed with the real `helm`;
//! - [`journal`]: the widget guest's per-key journals, and the check that no key ran twice at once;
//! - [`registry`]: local OCI registries to push guests to and pull them from;
//! - [`namespace`]: a fresh namespace per test;
//! - [`manifests`]: server-side apply of YAML files (CRDs, sample objects);
//! - [`wait`]: polling with a deadline and a message that says what was awaited;
//! - [`watch`]: recording what a `kube::runtime::watcher` delivers, for assertions;
//! - [`paths`]: the repository, the `cp` script and the built binaries.
//!
//! Cost model: the first `cp up` on a machine builds kube-apiserver, kubectl and etcd (about
//! 10 minutes on 2 cores, cached under `.cache/control-plane/`); starting a control plane then
//! takes a few seconds, and reusing the shared one costs one `/readyz` request.

pub mod accounts;
pub mod api_proxy;
pub mod clients;
pub mod cluster;
pub mod control_plane;
pub mod echo;
pub mod helm;
pub mod host;
pub mod journal;
pub mod manifests;
pub mod namespace;
pub mod paths;
pub mod pdns;
pub mod registry;
pub mod robustness;
pub mod wait;
pub mod watch;

pub use cluster::LocalCluster;
pub use control_plane::{ControlPlane, PrivateControlPlane, Restart, client_for_kubeconfig};
pub use host::{HostOptions, HostProcess, Profile, guest_component};
pub use manifests::{
    apply_crd_file, apply_file, create_widget, wait_crd_established, widget_resource, widgets,
    widgets_converged,
};
pub use namespace::test_namespace;
pub use paths::{cp_script, kubectl, repo_root};
pub use registry::{PrivateRegistry, Registry, with_password};
pub use wait::wait_until;
pub use watch::{Seen, WatchRecorder};

/// Field manager for everything these helpers write with server-side apply.
pub const FIELD_MANAGER: &str = "reconciler-host-tests";
