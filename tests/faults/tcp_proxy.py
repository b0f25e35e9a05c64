"""A TCP proxy between the platform and a test server that a test can cut and restore.

Cut, the proxy closes its listening socket and resets every open connection: clients see exactly what
a stopped or restarting endpoint gives them (connection refused, connection reset mid-request), while
the server behind it keeps its state. Restored, it listens on the same port again.
"""

from __future__ import annotations

import socket
import struct
import threading
import time


class TcpProxy:
    def __init__(self, upstream_port: int, host: str = "127.0.0.1"):
        self.host, self.upstream_port = host, upstream_port
        self.port = 0
        self.client_bytes = 0  # bytes forwarded client -> server: where a test cuts "mid-run"
        self.refused_while_cut = 0
        self._cut_at_bytes: int | None = None
        self._down_for_s = 0.0
        self._lock = threading.Lock()
        self._conns: list[socket.socket] = []
        self._listener: socket.socket | None = None
        self.cuts: list[float] = []  # monotonic times of every cut
        self.restores: list[float] = []
        self._listen()

    @property
    def url(self) -> str:
        return f"http://{self.host}:{self.port}"

    # -- faults ----------------------------------------------------------------------------------
    def cut_after(self, client_bytes: int, down_for_s: float) -> None:
        """Cut once `client_bytes` more bytes have gone upstream; restore `down_for_s` later."""
        with self._lock:
            self._cut_at_bytes = self.client_bytes + client_bytes
            self._down_for_s = down_for_s

    def cut(self) -> None:
        with self._lock:
            listener, self._listener = self._listener, None
            conns, self._conns = self._conns, []
        self.cuts.append(time.monotonic())
        # shutdown() first: close() alone neither wakes a thread blocked in accept()/recv() on the socket
        # nor releases it (the kernel keeps it while that call holds it), so the port would go on
        # accepting and a forwarded request would hang unanswered instead of failing
        if listener is not None:
            _shutdown(listener)
            listener.close()
        for conn in conns:
            # SO_LINGER 0: the last close sends RST, as a dying server's kernel does for open connections
            try:
                conn.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
            except OSError:
                pass
            _shutdown(conn)
            conn.close()

    def restore(self) -> None:
        self._listen()
        self.restores.append(time.monotonic())

    def close(self) -> None:
        self.cut()

    # -- plumbing --------------------------------------------------------------------------------
    def _listen(self) -> None:
        listener = socket.socket()
        listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        listener.bind((self.host, self.port))
        listener.listen(64)
        self.port = listener.getsockname()[1]
        with self._lock:
            self._listener = listener
        threading.Thread(target=self._accept, args=(listener,), daemon=True).start()

    def _accept(self, listener: socket.socket) -> None:
        while True:
            try:
                client, _ = listener.accept()
            except OSError:
                return  # closed by cut()
            upstream = socket.create_connection((self.host, self.upstream_port))
            with self._lock:
                if self._listener is not listener:  # cut between accept and here
                    client.close(), upstream.close()
                    return
                self._conns += [client, upstream]
            threading.Thread(target=self._pipe, args=(client, upstream, True), daemon=True).start()
            threading.Thread(target=self._pipe, args=(upstream, client, False), daemon=True).start()

    def _pipe(self, src: socket.socket, dst: socket.socket, upstream_bound: bool) -> None:
        try:
            while data := src.recv(65536):
                dst.sendall(data)
                if upstream_bound:
                    self._count(len(data))
        except OSError:
            pass
        finally:
            _shutdown(src)
            _shutdown(dst)

    def _count(self, n: int) -> None:
        with self._lock:
            self.client_bytes += n
            due = self._cut_at_bytes is not None and self.client_bytes >= self._cut_at_bytes
            if due:
                self._cut_at_bytes = None
        if due:
            self.cut()
            threading.Timer(self._down_for_s, self.restore).start()


def _shutdown(sock: socket.socket) -> None:
    try:
        sock.shutdown(socket.SHUT_RDWR)
    except OSError:
        pass  # already closed or never connected


class ProxyProcess:
    """A TcpProxy in a child process, driven over its stdin/stdout. The proxy must not share the
    platform's process: pyarrow finishes an abandoned S3 upload in its destructor while holding the GIL,
    so an in-process proxy could not forward that very upload and both would wait on each other."""

    def __init__(self, upstream_port: int):
        import subprocess
        import sys

        self._proc = subprocess.Popen([sys.executable, __file__, str(upstream_port)], stdin=subprocess.PIPE,
                                      stdout=subprocess.PIPE, text=True, bufsize=1)
        self.port = int(self._ask("port"))

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def client_bytes(self) -> int:
        return int(self._ask("bytes"))

    def cut_after(self, client_bytes: int, down_for_s: float) -> None:
        self._ask(f"cut_after {client_bytes} {down_for_s}")

    def outages(self) -> tuple[int, int]:
        """(cuts, restores) so far."""
        cuts, restores = self._ask("outages").split()
        return int(cuts), int(restores)

    def close(self) -> None:
        self._proc.stdin.close()
        self._proc.wait(timeout=10)

    def _ask(self, command: str) -> str:
        self._proc.stdin.write(command + "\n")
        return self._proc.stdout.readline().strip()


def _serve(upstream_port: int) -> None:
    import sys

    proxy = TcpProxy(upstream_port)
    for line in sys.stdin:
        command, *args = line.split()
        if command == "port":
            answer = str(proxy.port)
        elif command == "bytes":
            answer = str(proxy.client_bytes)
        elif command == "cut_after":
            proxy.cut_after(int(args[0]), float(args[1]))
            answer = "ok"
        else:  # outages
            answer = f"{len(proxy.cuts)} {len(proxy.restores)}"
        print(answer, flush=True)
    proxy.close()


if __name__ == "__main__":
    import sys

    _serve(int(sys.argv[1]))
