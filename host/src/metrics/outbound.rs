//! Guests' outbound HTTP (`wasi:http/outgoing-handler` on a grant's `http:`), per guest and
//! destination host: `reconciler_http_requests_total` by outcome, the bytes sent and
//! received, and the time from the request leaving the guest to its response in the host.

use std::time::Duration;

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};

use super::family::{HistogramFamily, Registrar, histograms};

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct RequestLabels {
    guest: String,
    host: String,
    /// `2xx` .. `5xx` (and `1xx`), `denied` (outside the grant or its addresses), `error`
    /// (no response: connection, TLS, a cap, the deadline), `shadow` (not sent: shadow mode),
    /// `replayed` (answered from a record or a fixture).
    outcome: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct DestinationLabels {
    guest: String,
    host: String,
}

impl DestinationLabels {
    fn new(guest: &str, host: &str) -> Self {
        Self {
            guest: guest.to_owned(),
            host: host.to_owned(),
        }
    }
}

/// 1 ms to ~33 s: a local API answers in milliseconds, a deadline cuts the slowest.
fn latency_buckets() -> Histogram {
    Histogram::new(exponential_buckets(0.001, 2.0, 16))
}

pub(super) struct OutboundFamilies {
    requests: Family<RequestLabels, Counter>,
    sent: Family<DestinationLabels, Counter>,
    received: Family<DestinationLabels, Counter>,
    duration: HistogramFamily<DestinationLabels>,
}

impl OutboundFamilies {
    pub(super) fn register(r: &mut Registrar) -> Self {
        Self {
            requests: r.add(
                "reconciler_http_requests",
                "Outbound HTTP requests of guests, by destination host and outcome (status class, denied, error, shadow, replayed)",
            ),
            sent: r.add(
                "reconciler_http_sent_bytes",
                "Request body bytes guests sent, by destination host",
            ),
            received: r.add(
                "reconciler_http_received_bytes",
                "Response body bytes guests received, by destination host",
            ),
            duration: r.seconds(
                "reconciler_http_request_duration",
                "Time from a guest's request to its whole response, by destination host",
                histograms(latency_buckets),
            ),
        }
    }

    pub(super) fn request(&self, guest: &str, host: &str, outcome: &'static str) {
        self.requests
            .get_or_create(&RequestLabels {
                guest: guest.to_owned(),
                host: host.to_owned(),
                outcome,
            })
            .inc();
    }

    pub(super) fn exchanged(
        &self,
        guest: &str,
        host: &str,
        sent: usize,
        received: usize,
        took: Duration,
    ) {
        let labels = DestinationLabels::new(guest, host);
        self.sent.get_or_create(&labels).inc_by(sent as u64);
        self.received.get_or_create(&labels).inc_by(received as u64);
        self.duration
            .get_or_create(&labels)
            .observe(took.as_secs_f64());
    }
}

#[cfg(test)]
mod tests {
    use crate::metrics::Metrics;

    #[test]
    fn requests_count_per_guest_host_and_outcome_with_their_bytes() {
        let metrics = Metrics::new();
        metrics.http_request("dns", "127.0.0.1", "2xx");
        metrics.http_request("dns", "127.0.0.1", "denied");
        metrics.http_exchanged(
            "dns",
            "127.0.0.1",
            10,
            300,
            std::time::Duration::from_millis(3),
        );
        let text = metrics.render();
        assert!(
            text.contains(
                r#"reconciler_http_requests_total{guest="dns",host="127.0.0.1",outcome="2xx"} 1"#
            ),
            "{text}"
        );
        assert!(text.contains(r#"outcome="denied"} 1"#), "{text}");
        assert!(
            text.contains(
                r#"reconciler_http_received_bytes_total{guest="dns",host="127.0.0.1"} 300"#
            ),
            "{text}"
        );
        assert!(
            text.contains(
                r#"reconciler_http_request_duration_seconds_count{guest="dns",host="127.0.0.1"} 1"#
            ),
            "{text}"
        );
    }
}
