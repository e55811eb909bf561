# One-off probe behind docs/cluster_probes.md (not a test; run it on an emulated cluster, see that file).
import socket, sys, threading, time
mode, role, host = sys.argv[1], sys.argv[2], sys.argv[3]
N = 16 << 20
buf = b"x" * (1 << 20)
def sender(s):
    left = N
    while left > 0:
        left -= s.send(buf[:min(left, len(buf))])
def receiver(s):
    got = 0
    while got < N:
        d = s.recv(1 << 20)
        if not d: break
        got += len(d)
def conns():
    if role == "server":
        l = socket.socket(); l.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1); l.bind((host, 5555)); l.listen(4)
        cs = [l.accept()[0] for _ in range(1 if mode == "one" else 2)]
    else:
        cs = []
        for _ in range(1 if mode == "one" else 2):
            for a in range(100):
                try:
                    c = socket.create_connection((host, 5555)); break
                except OSError: time.sleep(0.1)
            cs.append(c)
    return cs
cs = conns()
t = time.time()
if mode == "one":
    th = [threading.Thread(target=sender, args=(cs[0],)), threading.Thread(target=receiver, args=(cs[0],))]
else:
    a, b = (cs[0], cs[1])
    th = [threading.Thread(target=sender, args=(a if role == "server" else b,)), threading.Thread(target=receiver, args=(b if role == "server" else a,))]
[x.start() for x in th]; [x.join() for x in th]
print(mode, role, "%.2f MB/s each way" % (N / (time.time() - t) / 1e6), flush=True)
