//! Minimal HTTP/1.1 for the Runtime and Invoke APIs: keep-alive, `Content-Length` and
//! chunked request bodies.

use std::collections::HashMap;

use tokio::io::{AsyncBufReadExt, AsyncRead, AsyncReadExt, BufReader};

/// One request.
pub(crate) struct Request {
    pub(crate) method: String,
    pub(crate) path: String,
    /// Header names in lower case.
    pub(crate) headers: HashMap<String, String>,
    pub(crate) body: Vec<u8>,
}

/// The next request on a connection; `None` when the client closed it.
pub(crate) async fn read_request<R: AsyncRead + Unpin>(
    reader: &mut BufReader<R>,
) -> std::io::Result<Option<Request>> {
    let mut line = String::new();
    if reader.read_line(&mut line).await? == 0 {
        return Ok(None);
    }
    let mut parts = line.split_whitespace();
    let method = parts.next().unwrap_or_default().to_owned();
    let path = parts.next().unwrap_or_default().to_owned();
    let mut headers = HashMap::new();
    loop {
        let mut line = String::new();
        if reader.read_line(&mut line).await? == 0 {
            return Ok(None);
        }
        let line = line.trim_end();
        if line.is_empty() {
            break;
        }
        if let Some((name, value)) = line.split_once(':') {
            headers.insert(name.trim().to_ascii_lowercase(), value.trim().to_owned());
        }
    }
    let mut body = Vec::new();
    if headers
        .get("transfer-encoding")
        .is_some_and(|value| value.eq_ignore_ascii_case("chunked"))
    {
        loop {
            let mut size = String::new();
            reader.read_line(&mut size).await?;
            let size = usize::from_str_radix(size.trim().split(';').next().unwrap_or("0"), 16)
                .map_err(std::io::Error::other)?;
            if size == 0 {
                // Trailers, then the empty line.
                loop {
                    let mut trailer = String::new();
                    if reader.read_line(&mut trailer).await? == 0 || trailer.trim().is_empty() {
                        break;
                    }
                }
                break;
            }
            let start = body.len();
            body.resize(start + size, 0);
            reader.read_exact(&mut body[start..]).await?;
            let mut crlf = [0u8; 2];
            reader.read_exact(&mut crlf).await?;
        }
    } else if let Some(length) = headers.get("content-length") {
        let length: usize = length.parse().map_err(std::io::Error::other)?;
        body.resize(length, 0);
        reader.read_exact(&mut body).await?;
    }
    Ok(Some(Request {
        method,
        path,
        headers,
        body,
    }))
}

/// A response with a `Content-Length`.
pub(crate) fn response(status: &str, headers: &[(&str, String)], body: &[u8]) -> Vec<u8> {
    let mut head = format!("HTTP/1.1 {status}\r\nContent-Length: {}\r\n", body.len());
    for (name, value) in headers {
        head.push_str(&format!("{name}: {value}\r\n"));
    }
    head.push_str("\r\n");
    let mut bytes = head.into_bytes();
    bytes.extend_from_slice(body);
    bytes
}

/// `404 Not Found`, empty.
pub(crate) fn not_found() -> Vec<u8> {
    response("404 Not Found", &[], b"")
}

/// `202 Accepted`, as the Runtime API answers what a function posts.
pub(crate) fn accepted() -> Vec<u8> {
    response(
        "202 Accepted",
        &[("Content-Type", "application/json".to_owned())],
        br#"{"status":"OK"}"#,
    )
}
