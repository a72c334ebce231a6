"""moto's S3 server with every request serialised, for the store tests.

Plain `moto_server` checks a conditional write (If-Match / If-None-Match) and then writes
without a lock, so two racing writers can both win. Real S3 and MinIO apply a conditional
write atomically. This wrapper takes one lock around each whole request (reading the body,
checking, writing and rendering the response), which makes every request atomic.

Buckets whose name starts with `lying-` have their `If-Match` header removed before moto
sees it: such a bucket behaves like a server that accepts conditional replaces and ignores
them (MinIO issue #21526, s3s-fs, garage). The capability-probe tests use it. Only
path-style requests (`http://host:port/<bucket>/<key>`) are recognised.

Writes of a key longer than 1,024 bytes are refused with `400 KeyTooLongError`, as S3
refuses them (moto itself accepts any length).

Usage: python moto_serialised.py PORT   (listens on 127.0.0.1:PORT)
"""

import os
import sys
import threading

LYING_PREFIX = "lying-"
MAX_KEY_BYTES = 1024
KEY_TOO_LONG = (
    b'<?xml version="1.0" encoding="UTF-8"?>'
    b"<Error><Code>KeyTooLongError</Code><Message>Your key is too long</Message></Error>"
)


class Serialised:
    """WSGI middleware: one request at a time, response fully rendered inside the lock."""

    def __init__(self, app):
        self.app = app
        self.lock = threading.Lock()

    def __call__(self, environ, start_response):
        path = environ.get("PATH_INFO", "")
        bucket = path.lstrip("/").split("/", 1)[0]
        if bucket.startswith(LYING_PREFIX):
            environ.pop("HTTP_IF_MATCH", None)
        # PATH_INFO holds the decoded path's bytes as latin-1 characters.
        key = path.lstrip("/").split("/", 1)[1] if "/" in path.lstrip("/") else ""
        if environ.get("REQUEST_METHOD") == "PUT" and len(key.encode("latin-1", "replace")) > MAX_KEY_BYTES:
            start_response(
                "400 Bad Request",
                [("Content-Type", "application/xml"), ("Content-Length", str(len(KEY_TOO_LONG)))],
            )
            return [KEY_TOO_LONG]
        with self.lock:
            result = self.app(environ, start_response)
            try:
                body = [bytes(chunk) for chunk in result]
            finally:
                close = getattr(result, "close", None)
                if close is not None:
                    close()
        return body


def main():
    if len(sys.argv) != 2:
        sys.exit("usage: moto_serialised.py PORT")
    port = int(sys.argv[1])
    os.environ.setdefault("MOTO_PORT", str(port))

    from werkzeug.serving import run_simple
    from moto.moto_server.werkzeug_app import (
        DomainDispatcherApplication,
        MotoRequestHandler,
        create_backend_app,
    )

    app = DomainDispatcherApplication(create_backend_app)
    run_simple(
        "127.0.0.1",
        port,
        Serialised(app),
        threaded=True,
        use_reloader=False,
        request_handler=MotoRequestHandler,
    )


if __name__ == "__main__":
    main()
