#!/usr/bin/env python3
"""A client of the Plexus rendezvous store, written from the wire formats alone.

The security tests (stranger_test.sh, stray_test.sh) use it as an attacker
would: another user with no secret, or a process that has the job's secret but
is not part of the job. It depends on nothing of Plexus: the store frame is
described in core/src/store/store_protocol.hpp, the handshake in
auth/include/plexus/auth/handshake.hpp, and libsodium's primitives are
rebuilt from Python's hashlib (BLAKE2b with key/salt/person, HMAC-SHA-512
truncated to 32 bytes = crypto_auth).

  store_client.py [--token-file F | --token-env] [--as IDENTITY] [--tries N]
                  ADDR PORT CMD [ARGS...] [';' CMD [ARGS...]]...

  set KEY VALUE        SET
  add KEY DELTA        ADD
  get KEY [TIMEOUT_MS] GET
  sleep SECONDS        wait
  repeat N MS CMD...   the command N times, MS ms apart, on one connection

--token-env takes the secret from PLEXUS_TOKEN (as a rank under plexus-run).
Commands separated by ';' run one after the other on one connection.

--as claims IDENTITY (rank/N, node/N) after the handshake. Each command's
answer is one line on stdout: "ok [value]" or "refused: <status> <message>".
A connection that the server refuses or closes prints "refused: ..." too; one
that cannot be made at all (no server there) prints "unreachable: ...".
Exit status 0 when every answer was ok, 1 when any was refused, 2 on bad use.
"""
import hashlib
import hmac
import os
import socket
import struct
import sys
import time

STORE_MAGIC = 0x53584C50
AUTH_MAGIC = b"PLXA"
COMMANDS = {"set": 1, "get": 2, "add": 3, "wait": 4, "claim": 5}
REPLY = 16


class Refused(Exception):
    pass


class Unreachable(Exception):
    pass


def store_key(token):
    master = hashlib.blake2b(token.encode(), key=b"plexus job token v1", digest_size=32).digest()
    salt = struct.pack("<Q", 1) + bytes(8)           # crypto_kdf subkey id 1
    person = b"PLXSTORE" + bytes(8)                  # the store's context
    return hashlib.blake2b(b"", key=master, salt=salt, person=person, digest_size=32).digest()


def mac(key, role, ni, nr):
    data = b"plexus-auth-v1" + role + struct.pack("<BQI", 1, 0, 0) + ni + nr
    return hmac.new(key, data, hashlib.sha512).digest()[:32]


def auth_message(mtype, status=0, nonce=bytes(32), tag=bytes(32)):
    return AUTH_MAGIC + bytes([1, mtype, 1, status]) + bytes(8) + bytes(4) + bytes(4) + nonce + tag


def recv_exact(sock, n):
    data = b""
    while len(data) < n:
        chunk = sock.recv(n - len(data))
        if not chunk:
            raise Refused("the server closed the connection")
        data += chunk
    return data


def handshake(sock, token):
    key = store_key(token)
    ni = os.urandom(32)
    sock.sendall(auth_message(1, nonce=ni))                       # HELLO
    challenge = recv_exact(sock, 88)
    if challenge[5] != 2 or challenge[7] != 0:
        raise Refused("the server refused the handshake (status %d)" % challenge[7])
    nr, mac_r = challenge[24:56], challenge[56:88]
    if not hmac.compare_digest(mac_r, mac(key, b"responder", ni, nr)):
        raise Refused("the server does not know this secret")
    sock.sendall(auth_message(3, tag=mac(key, b"initiator", ni, nr)))  # PROOF
    result = recv_exact(sock, 88)
    if result[7] != 0:
        raise Refused("the server refused this secret")


def frame(command, key, value):
    key = key.encode()
    return struct.pack("<IHBBIQ", STORE_MAGIC, 1, command, 0, len(key), len(value)) + key + value


def call(sock, command, key, value):
    sock.sendall(frame(command, key, value))
    magic, _, cmd, _, _, vlen = struct.unpack("<IHBBIQ", recv_exact(sock, 20))
    if magic != STORE_MAGIC or cmd != REPLY:
        raise Refused("not a store reply")
    body = recv_exact(sock, vlen)
    status, mlen = struct.unpack("<iI", body[:8])
    return status, body[8:8 + mlen].decode(errors="replace"), body[8 + mlen:]


def connect(addr, port, token, identity, tries):
    last = None
    for _ in range(tries):
        try:
            sock = socket.create_connection((addr, port), timeout=10)
            sock.settimeout(120)
            break
        except OSError as e:
            last = e
            time.sleep(0.02)
    else:
        raise Unreachable("cannot connect: %s" % last)
    if token:
        handshake(sock, token)
    if identity:
        status, message, _ = call(sock, COMMANDS["claim"], identity,
                                  os.urandom(32) + b"store_client.py pid %d" % os.getpid())
        if status != 0:
            raise Refused("%d %s" % (status, message))
    return sock


def run(sock, words):
    name, args = words[0], words[1:]
    if name == "sleep":
        time.sleep(float(args[0]))
        return True
    if name == "set":
        status, message, payload = call(sock, 1, args[0], args[1].encode())
    elif name == "get":
        ms = int(args[1]) if len(args) > 1 else 0
        status, message, payload = call(sock, 2, args[0], struct.pack("<Q", ms))
    elif name == "add":
        status, message, payload = call(sock, 3, args[0], struct.pack("<q", int(args[1])))
        if status == 0:
            payload = str(struct.unpack("<q", payload)[0]).encode()
    else:
        raise SystemExit("store_client.py: unknown command %r" % name)
    if status == 0:
        print("ok " + payload.decode(errors="replace"), flush=True)
        return True
    print("refused: %d %s" % (status, message), flush=True)
    return False


def main(argv):
    token, identity, tries = None, None, 50
    while argv and argv[0].startswith("--"):
        opt = argv.pop(0)
        if opt == "--token-file":
            with open(argv.pop(0)) as f:
                token = f.read().strip()
        elif opt == "--token-env":
            token = os.environ.get("PLEXUS_TOKEN") or None
        elif opt == "--as":
            identity = argv.pop(0)
        elif opt == "--tries":
            tries = int(argv.pop(0))
        else:
            raise SystemExit("store_client.py: unknown option %s" % opt)
    if len(argv) < 3:
        print(__doc__, file=sys.stderr)
        return 2
    addr, port, words = argv[0], int(argv[1]), argv[2:]
    commands = [[]]
    for w in words:
        if w == ";":
            commands.append([])
        else:
            commands[-1].append(w)
    ok = True
    try:
        sock = connect(addr, port, token, identity, tries)
        for words in filter(None, commands):
            if words[0] == "repeat":
                n, ms, words = int(words[1]), int(words[2]), words[3:]
                for _ in range(n):
                    ok = run(sock, words) and ok
                    time.sleep(ms / 1000)
            else:
                ok = run(sock, words) and ok
        return 0 if ok else 1
    except Unreachable as e:
        print("unreachable: %s" % e, flush=True)
        return 1
    except (Refused, OSError) as e:
        print("refused: %s" % e, flush=True)
        return 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
