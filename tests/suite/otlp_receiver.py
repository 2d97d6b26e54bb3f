"""An OTLP profiles receiver for bprof's tests, built from the official
generated code (PyPI's opentelemetry-proto and grpcio, installed by
scripts/install-deps.sh into /opt/bprof-test-venv).

    otlp_receiver.py grpc|http [PORT [CERT KEY]]

listens on 127.0.0.1 (PORT, or one the kernel picks; with TLS when given
a PEM certificate and key), prints "port N",
then one JSON line per request it took: every profile decoded with the
official classes and resolved through the dictionary (function names,
mapping files and build IDs, attributes), plus the fields it did not know
(there must be none). gRPC answers ExportProfilesServiceResponse; the HTTP
server takes POST on any path, gunzips a Content-Encoding: gzip body, and
answers the same message as application/x-protobuf.
"""

import gzip
import http.server
import json
import ssl
import sys
import threading
import time
from concurrent import futures

import grpc
from google.protobuf import unknown_fields
from opentelemetry.proto.collector.profiles.v1development import (
    profiles_service_pb2 as service_pb2,
    profiles_service_pb2_grpc as service_grpc,
)

LOCK = threading.Lock()


def unknown(msg):
    """Fields of msg and every message inside it that the classes do not know."""
    n = len(unknown_fields.UnknownFieldSet(msg))
    for field, value in msg.ListFields():
        if field.message_type is None:
            continue
        if field.is_repeated:
            n += sum(unknown(v) for v in value)
        else:
            n += unknown(value)
    return n


def any_value(v):
    kind = v.WhichOneof("value")
    return None if kind is None else getattr(v, kind)


def summary(req, transport, headers, path=None):
    d = req.dictionary
    st = list(d.string_table)

    def s(i):
        return st[i]

    def attrs(indices):
        out = {}
        for i in indices:
            kv = d.attribute_table[i]
            out[s(kv.key_strindex)] = any_value(kv.value)
        return out

    def frames(stack_index):
        names = []
        for li in d.stack_table[stack_index].location_indices:
            for line in d.location_table[li].lines:
                names.append(s(d.function_table[line.function_index].name_strindex))
        return names

    zero = (
        len(st) > 0 and st[0] == ""
        and all(len(t) > 0 and t[0].ByteSize() == 0 for t in (
            d.mapping_table, d.location_table, d.function_table, d.link_table,
            d.attribute_table, d.stack_table))
    )
    resources = []
    for rp in req.resource_profiles:
        profiles = []
        for sp in rp.scope_profiles:
            for p in sp.profiles:
                profiles.append({
                    "scope": sp.scope.name,
                    "sample_type": [s(p.sample_type.type_strindex), s(p.sample_type.unit_strindex)],
                    "period_type": [s(p.period_type.type_strindex), s(p.period_type.unit_strindex)],
                    "period": p.period,
                    "time_unix_nano": p.time_unix_nano,
                    "duration_nano": p.duration_nano,
                    "profile_id": p.profile_id.hex(),
                    "samples": [{
                        "frames": frames(x.stack_index),
                        "values": list(x.values),
                        "attributes": attrs(x.attribute_indices),
                    } for x in p.samples],
                })
        resources.append({
            "attributes": {kv.key: any_value(kv.value) for kv in rp.resource.attributes},
            "profiles": profiles,
        })
    mappings = [{
        "file": s(m.filename_strindex),
        "attributes": attrs(m.attribute_indices),
    } for m in d.mapping_table[1:]]
    return {
        "received": time.time(),
        "transport": transport,
        "path": path,
        "headers": headers,
        "unknown_fields": unknown(req),
        "zero_entries": zero,
        "resources": resources,
        "mappings": mappings,
    }


def emit(obj):
    with LOCK:
        print(json.dumps(obj), flush=True)


def emit_port(port):
    with LOCK:
        print(f"port {port}", flush=True)


class Service(service_grpc.ProfilesServiceServicer):
    def Export(self, request, context):
        headers = {k: v for k, v in context.invocation_metadata() if isinstance(v, str)}
        emit(summary(request, "grpc", headers))
        return service_pb2.ExportProfilesServiceResponse()


class Handler(http.server.BaseHTTPRequestHandler):
    def do_POST(self):
        body = self.rfile.read(int(self.headers.get("Content-Length", "0")))
        encoding = self.headers.get("Content-Encoding", "")
        if encoding == "gzip":
            body = gzip.decompress(body)
        req = service_pb2.ExportProfilesServiceRequest()
        req.ParseFromString(body)
        headers = {k.lower(): v for k, v in self.headers.items()}
        emit(summary(req, "http", headers, self.path))
        answer = service_pb2.ExportProfilesServiceResponse().SerializeToString()
        self.send_response(200)
        self.send_header("Content-Type", "application/x-protobuf")
        self.send_header("Content-Length", str(len(answer)))
        self.end_headers()
        self.wfile.write(answer)

    def log_message(self, *args):
        pass


def main():
    kind = sys.argv[1]
    port = int(sys.argv[2]) if len(sys.argv) > 2 else 0
    tls = sys.argv[3:5] if len(sys.argv) > 4 else None
    if kind == "grpc":
        server = grpc.server(futures.ThreadPoolExecutor(max_workers=4))
        service_grpc.add_ProfilesServiceServicer_to_server(Service(), server)
        if tls:
            cert, key = (open(f, "rb").read() for f in tls)
            creds = grpc.ssl_server_credentials([(key, cert)])
            port = server.add_secure_port(f"127.0.0.1:{port}", creds)
        else:
            port = server.add_insecure_port(f"127.0.0.1:{port}")
        server.start()
        emit_port(port)
        server.wait_for_termination()
    else:
        server = http.server.ThreadingHTTPServer(("127.0.0.1", port), Handler)
        if tls:
            ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
            ctx.load_cert_chain(tls[0], tls[1])
            server.socket = ctx.wrap_socket(server.socket, server_side=True)
        emit_port(server.server_address[1])
        server.serve_forever()


if __name__ == "__main__":
    main()
