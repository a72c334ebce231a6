//! The HTTP connector that counts, per operation, the attempts that may have reached the
//! server, so a failed `PUT` none of whose attempts left the machine is not reported as
//! ambiguous (see "Conditional-write outcomes" in the [module docs](super)).

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use async_trait::async_trait;
use object_store::ClientOptions;
use object_store::client::{
    HttpClient, HttpConnector, HttpError, HttpErrorKind, HttpRequest, HttpResponse, HttpService,
    ReqwestConnector,
};

/// How many HTTP attempts of one operation may have reached the server: every attempt
/// except those that failed while connecting. Carried to the connector in the request's
/// extensions.
#[derive(Debug, Clone, Default)]
pub(super) struct Attempts(Arc<AtomicUsize>);

impl Attempts {
    pub(super) fn count(&self) -> usize {
        self.0.load(Ordering::SeqCst)
    }
}

/// object_store's reqwest connector, wrapped to count [`Attempts`].
#[derive(Debug, Default)]
pub(super) struct CountingConnector;

impl HttpConnector for CountingConnector {
    fn connect(&self, options: &ClientOptions) -> object_store::Result<HttpClient> {
        let inner = ReqwestConnector::default().connect(options)?;
        Ok(HttpClient::new(CountingService(inner)))
    }
}

#[derive(Debug)]
struct CountingService(HttpClient);

#[async_trait]
impl HttpService for CountingService {
    async fn call(&self, request: HttpRequest) -> Result<HttpResponse, HttpError> {
        let attempts = request.extensions().get::<Attempts>().cloned();
        let result = self.0.execute(request).await;
        let never_sent = matches!(&result, Err(err) if err.kind() == HttpErrorKind::Connect);
        if let Some(attempts) = attempts
            && !never_sent
        {
            attempts.0.fetch_add(1, Ordering::SeqCst);
        }
        result
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use bytes::Bytes;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    use tokio::net::TcpListener;

    use crate::store::s3::{S3Options, S3Store};
    use crate::store::{PointerStoreExt, PutMode, StoreError, StoreKey, Version};

    fn store_at(endpoint: &str, max_retries: usize) -> S3Store {
        let options = S3Options {
            endpoint: Some(endpoint.to_owned()),
            region: Some("us-east-1".into()),
            allow_http: Some(true),
            access_key_id: Some("test".into()),
            secret_access_key: Some("test".into()),
            max_retries: Some(max_retries),
            retry_timeout: Some(Duration::from_secs(10)),
            ..S3Options::default()
        };
        S3Store::from_uri("s3://bucket/p", &options).expect("store")
    }

    /// A one-shot HTTP server on 127.0.0.1 that reads each request's head, then answers
    /// with `response` (or closes the connection when it is empty). Returns its endpoint.
    async fn canned_server(response: &'static str, connections: usize) -> String {
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let endpoint = format!("http://{}", listener.local_addr().expect("address"));
        tokio::spawn(async move {
            for _ in 0..connections {
                let Ok((mut socket, _)) = listener.accept().await else {
                    return;
                };
                let mut request = Vec::new();
                let mut buffer = [0u8; 4096];
                while !request.windows(4).any(|w| w == b"\r\n\r\n") {
                    match socket.read(&mut buffer).await {
                        Ok(0) | Err(_) => break,
                        Ok(n) => request.extend_from_slice(&buffer[..n]),
                    }
                }
                if !response.is_empty() {
                    let _ = socket.write_all(response.as_bytes()).await;
                }
                let _ = socket.shutdown().await;
            }
        });
        endpoint
    }

    fn key() -> StoreKey {
        StoreKey::new("i/=k").expect("key")
    }

    #[tokio::test]
    async fn a_refused_connection_is_unavailable_not_ambiguous() {
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let endpoint = format!("http://{}", listener.local_addr().expect("address"));
        drop(listener);
        let store = store_at(&endpoint, 2);
        for mode in [PutMode::Create, PutMode::Update(Version::new("\"e\""))] {
            let result = store.put(&key(), Bytes::from_static(b"v"), mode).await;
            assert!(
                matches!(
                    result,
                    Err(StoreError::Unavailable {
                        retryable: true,
                        ..
                    })
                ),
                "{result:?}"
            );
        }
        let read = store.get(&key()).await;
        assert!(
            matches!(
                read,
                Err(StoreError::Unavailable {
                    retryable: true,
                    ..
                })
            ),
            "{read:?}"
        );
    }

    #[tokio::test]
    async fn a_dropped_connection_after_sending_is_ambiguous() {
        // The first connection is the listing-classes marker check before the first write.
        let endpoint = canned_server("", 2).await;
        let store = store_at(&endpoint, 0);
        let result = store
            .put(&key(), Bytes::from_static(b"v"), PutMode::Create)
            .await;
        assert!(
            matches!(result, Err(StoreError::Ambiguous(_))),
            "{result:?}"
        );
    }

    #[tokio::test]
    async fn a_server_error_on_a_write_is_ambiguous() {
        const ERROR: &str =
            "HTTP/1.1 500 Internal Server Error\r\ncontent-length: 0\r\nconnection: close\r\n\r\n";
        let endpoint = canned_server(ERROR, 3).await;
        let store = store_at(&endpoint, 1);
        let result = store
            .put(
                &key(),
                Bytes::from_static(b"v"),
                PutMode::Update(Version::new("\"e\"")),
            )
            .await;
        assert!(
            matches!(result, Err(StoreError::Ambiguous(_))),
            "{result:?}"
        );
    }

    #[tokio::test]
    async fn a_refused_signature_is_fatal() {
        const DENIED: &str =
            "HTTP/1.1 403 Forbidden\r\ncontent-length: 0\r\nconnection: close\r\n\r\n";
        // The listing-classes marker check before the first write, the write, the read.
        let endpoint = canned_server(DENIED, 3).await;
        let store = store_at(&endpoint, 0);
        let write = store
            .put(&key(), Bytes::from_static(b"v"), PutMode::Create)
            .await;
        assert!(
            matches!(
                write,
                Err(StoreError::Unavailable {
                    retryable: false,
                    ..
                })
            ),
            "{write:?}"
        );
        let read = store.get(&key()).await;
        assert!(
            matches!(
                read,
                Err(StoreError::Unavailable {
                    retryable: false,
                    ..
                })
            ),
            "{read:?}"
        );
    }
}
