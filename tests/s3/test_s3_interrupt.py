"""Ctrl-C during `inspect` of an experiment on a slow S3 endpoint that then stops answering:
the partial report and exit 130 at once, not after the reads in flight (which never end)."""

from __future__ import annotations

import os
import signal
import socket
import threading
import time

from terminal import inspect_on_a_terminal, large_sweep, partial_report

TRIALS = 60  # at ~0.3 s a response and 8 readers, seconds of reading


class SlowProxy:
    """A TCP proxy in front of the S3 server that holds each response chunk `delay_s`, and,
    once `freeze()` is called, holds every byte for good (an endpoint that stopped answering)."""

    def __init__(self, upstream: str, delay_s: float) -> None:
        host, port = upstream.rsplit(":", 1)
        self.upstream = (host, int(port))
        self.delay_s = delay_s
        self.frozen = threading.Event()
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.endpoint = f"127.0.0.1:{self.listener.getsockname()[1]}"
        self.sockets: list[socket.socket] = []
        threading.Thread(target=self._accept, daemon=True).start()

    def freeze(self) -> None:
        self.frozen.set()

    def close(self) -> None:
        self.frozen.set()
        for sock in [self.listener, *self.sockets]:
            sock.close()

    def _accept(self) -> None:
        while True:
            try:
                client, _ = self.listener.accept()
            except OSError:
                return
            server = socket.create_connection(self.upstream)
            self.sockets += [client, server]
            threading.Thread(target=self._pump, args=(client, server, 0.0), daemon=True).start()
            threading.Thread(
                target=self._pump, args=(server, client, self.delay_s), daemon=True
            ).start()

    def _pump(self, source: socket.socket, dest: socket.socket, delay_s: float) -> None:
        while True:
            try:
                data = source.recv(65536)
            except OSError:
                return
            if not data:
                return
            time.sleep(delay_s)
            if self.frozen.is_set():
                self.frozen.wait()  # set already: hold the bytes until the sockets close
                return
            try:
                dest.sendall(data)
            except OSError:
                return


def test_ctrl_c_on_a_slow_endpoint_ends_at_once_with_the_partial_report(
    fixtures, s3_server, tmp_path
):
    sweep = large_sweep(fixtures, tmp_path, TRIALS)
    bucket = s3_server.bucket()
    s3_server.upload(sweep, bucket, "large_sweep")
    proxy = SlowProxy(s3_server.endpoint, delay_s=0.3)
    uri = f"s3://{bucket}/large_sweep?endpoint_override={proxy.endpoint}&scheme=http"
    try:
        with inspect_on_a_terminal(uri, s3_server.env) as (child, terminal):
            shown = terminal.wait_for(b"reading large_sweep", child, limit_s=180)
            assert shown and child.poll() is None, "inspect ended before the progress bar showed"
            proxy.freeze()  # from now on no read in flight ever completes
            os.killpg(child.pid, signal.SIGINT)
            out, _ = child.communicate(timeout=60)  # waiting for the reads would never end
    finally:
        proxy.close()
    report = partial_report(child, terminal.seen, out)
    assert report["experiments"][0]["trials"] < TRIALS
