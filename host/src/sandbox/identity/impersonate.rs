//! A client that sends every request as a guest's ServiceAccount: the host's own client (its
//! connection pool, credentials and TLS) wrapped in a service that adds one
//! `Impersonate-User` header per request. Cost: one header per request and one small buffer
//! task per guest version; no connection of its own.
//!
//! No group is sent: the API server gives an impersonated ServiceAccount its groups itself, and
//! constrained impersonation (KEP-5284) refuses a ServiceAccount impersonated with groups.

use std::task::{Context, Poll};

use futures::future::BoxFuture;
use http::{HeaderName, HeaderValue, Request, Response};
use kube::client::Body;

use crate::config::ServiceAccountRef;

/// The header the API server's impersonation filter reads (`authentication/v1`).
const IMPERSONATE_USER: HeaderName = HeaderName::from_static("impersonate-user");

/// `client`, sending every request as `account`.
pub(crate) fn client_as(client: &kube::Client, account: &ServiceAccountRef) -> kube::Client {
    let service = Impersonating {
        inner: client.clone(),
        // A validated account name is a DNS label and subdomain: always a valid header value.
        user: HeaderValue::from_str(&account.username())
            .unwrap_or_else(|_| HeaderValue::from_static("system:anonymous")),
    };
    kube::Client::new(service, client.default_namespace().to_owned())
}

#[derive(Clone)]
struct Impersonating {
    inner: kube::Client,
    user: HeaderValue,
}

impl tower::Service<Request<Body>> for Impersonating {
    type Response = Response<Body>;
    type Error = kube::Error;
    type Future = BoxFuture<'static, Result<Response<Body>, kube::Error>>;

    fn poll_ready(&mut self, _: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        // The inner client waits for its own buffer's capacity in `send`.
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, mut request: Request<Body>) -> Self::Future {
        // Insert, not append: whatever built the request, one identity goes out.
        request
            .headers_mut()
            .insert(IMPERSONATE_USER, self.user.clone());
        let inner = self.inner.clone();
        Box::pin(async move { inner.send(request).await })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A client whose service answers with the impersonation header it was sent.
    fn echo() -> kube::Client {
        let service = tower::service_fn(|request: Request<Body>| async move {
            let seen = request
                .headers()
                .get_all(IMPERSONATE_USER)
                .iter()
                .map(|v| v.to_str().unwrap_or("?").to_owned())
                .collect::<Vec<_>>()
                .join(",");
            Ok::<_, std::convert::Infallible>(Response::new(Body::from(seen.into_bytes())))
        });
        kube::Client::new(service, "default")
    }

    #[tokio::test]
    async fn every_request_carries_exactly_the_accounts_user() {
        let account: ServiceAccountRef = "guests/greeter".parse().unwrap();
        let client = client_as(&echo(), &account);
        // A request that already names someone else goes out as the account alone.
        let request = Request::builder()
            .uri("/api/v1/namespaces/guests/configmaps")
            .header("Impersonate-User", "system:admin")
            .body(Body::empty())
            .unwrap();
        let response = client.send(request).await.unwrap();
        let body = response.into_body().collect_bytes().await.unwrap();
        assert_eq!(&body[..], b"system:serviceaccount:guests:greeter");
    }
}
