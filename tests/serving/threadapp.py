"""A WSGI app for tests/serving/test_gunicorn_worker.py: answers with the thread that served the
request, and waits a little on POST /slow so that several requests can be in flight at once."""

import threading
import time


def application(environ, start_response):
    body = environ["wsgi.input"].read()
    if environ["PATH_INFO"] == "/slow":
        time.sleep(0.3)
    out = f"{threading.get_ident()} {environ['PATH_INFO']} {len(body)}".encode()
    start_response("200 OK", [("Content-Type", "text/plain"), ("Content-Length", str(len(out)))])
    return [out]
