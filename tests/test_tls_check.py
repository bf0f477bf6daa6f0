"""The TLS check before a client's bootstrap (``kafka_clients._tls_answer``): a listener that speaks TLS passes, one
that is silent or answers in plain bytes is named, and an address nothing listens on is left to kafka-python."""

from __future__ import annotations

import socket
import ssl
import threading
import time
from pathlib import Path

import pytest

from streamer.config import KafkaConfig
from streamer.pipeline.kafka_clients import KafkaUnavailable, _check_tls_listeners, _tls_answer


def _listener(serve) -> int:
    """A local listener whose connections each get ``serve(conn)`` on a thread; returns its port."""
    srv = socket.create_server(("127.0.0.1", 0))

    def loop():
        while True:
            conn, _ = srv.accept()
            threading.Thread(target=serve, args=(conn,), daemon=True).start()
    threading.Thread(target=loop, daemon=True).start()
    return srv.getsockname()[1]


@pytest.fixture(scope="module")
def tls_port():
    d = Path(__file__).parent / "data" / "tls"  # a self-signed pair for this test only (openssl req -x509 -nodes)
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    ctx.load_cert_chain(d / "cert.pem", d / "key.pem")

    def serve(conn):
        try:
            with ctx.wrap_socket(conn, server_side=True) as tls:
                tls.recv(1)
        except OSError:
            pass
    return _listener(serve)


def _silent(conn):
    threading.Event().wait(30)
    conn.close()


def _plain_bytes(conn):
    conn.recv(1024)
    conn.sendall(b"\x00\x00\x00\x08not tls!")
    conn.close()


def test_a_tls_listener_passes(tls_port):
    assert _tls_answer("127.0.0.1", tls_port, 5.0) is True
    _check_tls_listeners(KafkaConfig(bootstrap=f"127.0.0.1:{tls_port}", security_protocol="SSL"))


def test_a_silent_listener_is_named_within_the_timeout():
    port = _listener(_silent)
    assert _tls_answer("127.0.0.1", port, 0.5) == "no TLS handshake answer within 0.5 s"


def test_a_plain_answer_is_named():
    why = _tls_answer("127.0.0.1", _listener(_plain_bytes), 5.0)
    assert why is not None and why.startswith("an answer that is not TLS"), why


def test_nothing_listening_is_left_to_kafka_python():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]  # bound, not listening: refused
        assert _tls_answer("127.0.0.1", port, 1.0) is None


def _refused_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]  # closed when returned: nothing listens there


def test_a_plain_listener_beside_an_unreachable_one_still_raises():
    """An unknown answer (refused) ended the check as a TLS one did, so kafka-python waited on the plain listener."""
    plain = _listener(_plain_bytes)
    with pytest.raises(KafkaUnavailable, match=rf"but 127.0.0.1:{plain}: an answer that is not TLS"):
        _check_tls_listeners(KafkaConfig(bootstrap=f"127.0.0.1:{_refused_port()},127.0.0.1:{plain}",
                                         security_protocol="SSL", connect_timeout_s=2))
    _check_tls_listeners(KafkaConfig(bootstrap=f"127.0.0.1:{_refused_port()}", security_protocol="SSL"))  # unknown


def test_silent_listeners_are_asked_at_once_within_one_timeout():
    """Three silent addresses one after another took three timeouts, on every client built."""
    ports = [_listener(_silent) for _ in range(3)]
    t0 = time.monotonic()
    with pytest.raises(KafkaUnavailable) as e:
        _check_tls_listeners(KafkaConfig(bootstrap=",".join(f"127.0.0.1:{p}" for p in ports), security_protocol="SSL",
                                         connect_timeout_s=1))
    assert time.monotonic() - t0 < 2.0
    assert all(f"127.0.0.1:{p}: no TLS handshake answer within 1 s" in str(e.value) for p in ports)


def test_one_tls_listener_among_the_bootstrap_suffices_and_none_raises(tls_port):
    silent = _listener(_silent)
    _check_tls_listeners(KafkaConfig(bootstrap=f"127.0.0.1:{silent},127.0.0.1:{tls_port}", security_protocol="SSL",
                                     connect_timeout_s=0.5))
    with pytest.raises(KafkaUnavailable, match=rf"security_protocol SASL_SSL, but 127.0.0.1:{silent}: no TLS handshake "
                                               r"answer within 0.5 s: is the listener plain TCP\?"):
        _check_tls_listeners(KafkaConfig(bootstrap=f"127.0.0.1:{silent}", security_protocol="SASL_SSL",
                                         sasl_mechanism="PLAIN", connect_timeout_s=0.5))
    _check_tls_listeners(KafkaConfig(bootstrap=f"127.0.0.1:{silent}"))  # PLAINTEXT: no check
