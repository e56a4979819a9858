"""Client: every ragkv.v1 RPC with deadlines, bearer auth and retries.

Unary and client-streaming calls that fail with UNAVAILABLE are retried with
exponential backoff (every ragkv RPC is idempotent). Server streams are
retried only if nothing was received yet. Errors raise RagkvError carrying
the gRPC status code and message.

Request ids: every call sends an `x-request-id` (the same on each retry):
the one set with `with client.request_id("..."):`, else a fresh
"py-<16 hex digits>". The server logs it, ends its error messages with it
(RagkvError.request_id) and echoes it; `client.last_request_id` is the id of
the calling thread's / task's last call.
"""
import contextlib
import contextvars
import os
import random
import re
import secrets
import stat
import time

import grpc

from ragkv.v1 import blend_pb2, blend_pb2_grpc
from ragkv.v1 import common_pb2  # also re-exported for callers
from ragkv.v1 import engine_pb2, engine_pb2_grpc
from ragkv.v1 import kvstore_pb2, kvstore_pb2_grpc
from ragkv.v1 import precompute_pb2, precompute_pb2_grpc
from ragkv.v1 import retrieval_pb2, retrieval_pb2_grpc


_REQUEST_ID = contextvars.ContextVar("ragkv_request_id", default=None)
_LAST_REQUEST_ID = contextvars.ContextVar("ragkv_last_request_id", default=None)
_SANE_REQUEST_ID = re.compile(r"^[A-Za-z0-9._:-]{1,64}$")


class RagkvError(Exception):
    """A failed call: .code is a grpc.StatusCode, .details the message and
    .request_id the sidecar's id of the call (from "[request_id=...]" in
    the message; None if absent). Raised as the subclass of its code."""

    def __init__(self, code, details):
        super().__init__(f"{code.name}: {details}")
        self.code = code
        self.details = details
        m = re.search(r"\[request_id=([A-Za-z0-9._:-]+)\]", details or "")
        self.request_id = m.group(1) if m else None


class InvalidArgument(RagkvError):
    """The request is malformed (wrong shape, out of range, unknown name)."""


class NotFound(RagkvError):
    """A chunk, document, job or stored KV that is not there."""


class PermissionDenied(RagkvError):
    """A corpus path outside the sidecar's --corpus-root."""


class Unauthenticated(RagkvError):
    """A missing or wrong bearer token."""


class ResourceExhausted(RagkvError):
    """Load shedding, rate limits, a size limit or a full disk."""


class FailedPrecondition(RagkvError):
    """The server cannot do this now (no model loaded, wrong fingerprint)."""


class Unavailable(RagkvError):
    """The sidecar (or a tier) is unreachable; retried before it is raised."""


class DeadlineExceeded(RagkvError):
    """The call's deadline passed."""


class OutOfRange(RagkvError):
    """A prompt over the model's context."""


class DataLoss(RagkvError):
    """Stored bytes failed their checksum."""


_ERRORS = {
    grpc.StatusCode.INVALID_ARGUMENT: InvalidArgument,
    grpc.StatusCode.NOT_FOUND: NotFound,
    grpc.StatusCode.PERMISSION_DENIED: PermissionDenied,
    grpc.StatusCode.UNAUTHENTICATED: Unauthenticated,
    grpc.StatusCode.RESOURCE_EXHAUSTED: ResourceExhausted,
    grpc.StatusCode.FAILED_PRECONDITION: FailedPrecondition,
    grpc.StatusCode.UNAVAILABLE: Unavailable,
    grpc.StatusCode.DEADLINE_EXCEEDED: DeadlineExceeded,
    grpc.StatusCode.OUT_OF_RANGE: OutOfRange,
    grpc.StatusCode.DATA_LOSS: DataLoss,
}


def error_for(code, details):
    """The RagkvError subclass of `code` (RagkvError itself for the rest)."""
    return _ERRORS.get(code, RagkvError)(code, details)


class FusedKV:
    """The result of Blend / RetrieveAndBlend: header, per-layer K/V bytes,
    recomputed-token masks and the summary."""

    def __init__(self):
        self.header = None
        self.k = []
        self.v = []
        self.masks = []
        self.summary = None
        self.restarts = []  # FailedLoad of each restart (summary.failed_loads lists all)

    def layer_views(self, layer):
        """(k, v) of `layer` as memoryviews of shape [kv_heads, tokens,
        head_dim] over the received bytes (no copy): format 'f' for F32,
        'H' (the raw 16-bit patterns) for F16 / BF16. With numpy,
        numpy.frombuffer(view, numpy.float16).reshape(view.shape) is a
        zero-copy array too (see layer_arrays)."""
        lay = self.header.layout
        fmt = "f" if lay.dtype == common_pb2.DTYPE_F32 else "H"
        shape = [lay.num_kv_heads, lay.num_tokens, lay.head_dim]
        return tuple(memoryview(b).cast(fmt, shape=shape) for b in (self.k[layer], self.v[layer]))

    def layer_arrays(self, layer):
        """(k, v) of `layer` as read-only numpy arrays without a copy
        (ImportError without numpy; BF16 comes back as uint16 bit patterns)."""
        import numpy as np
        dt = {common_pb2.DTYPE_F32: np.float32, common_pb2.DTYPE_F16: np.float16}.get(
            self.header.layout.dtype, np.uint16)
        lay = self.header.layout
        shape = (lay.num_kv_heads, lay.num_tokens, lay.head_dim)
        return tuple(np.frombuffer(b, dtype=dt).reshape(shape) for b in (self.k[layer], self.v[layer]))

    def recomputed(self, layer, token):
        m = self.masks[layer]
        return token // 8 < len(m) and (m[token // 8] >> (token % 8)) & 1 == 1


def resolve_auth_token(auth_token=None, auth_token_file=None):
    """The bearer token, as the ragkv CLI resolves it: auth_token_file (its
    content, trailing whitespace stripped; refused when other users may read
    or write it), else auth_token, else $RAGKV_AUTH_TOKEN, else None."""
    if auth_token and auth_token_file:
        raise ValueError("give auth_token or auth_token_file, not both")
    if auth_token_file:
        st = os.stat(auth_token_file)
        if st.st_mode & (stat.S_IROTH | stat.S_IWOTH):
            raise ValueError(f"{auth_token_file}: readable or writable by other users "
                             "(chmod 600 it)")
        with open(auth_token_file, encoding="utf-8") as f:
            token = f.read().rstrip()
        if not token:
            raise ValueError(f"{auth_token_file}: empty")
        return token
    if auth_token:
        return auth_token
    return os.environ.get("RAGKV_AUTH_TOKEN", "").rstrip() or None


class Client:
    """auth_token / auth_token_file / $RAGKV_AUTH_TOKEN: see resolve_auth_token."""

    def __init__(self, target, auth_token=None, deadline_s=60.0, max_attempts=5,
                 initial_backoff_s=0.05, max_backoff_s=2.0, root_certificates=None,
                 server_name=None, max_message_bytes=64 << 20, auth_token_file=None):
        auth_token = resolve_auth_token(auth_token, auth_token_file)
        opts = [("grpc.max_receive_message_length", max_message_bytes),
                ("grpc.max_send_message_length", max_message_bytes)]
        if root_certificates is not None:
            if server_name:
                opts.append(("grpc.ssl_target_name_override", server_name))
            creds = grpc.ssl_channel_credentials(root_certificates=root_certificates)
            self._channel = grpc.secure_channel(target, creds, options=opts)
        else:
            self._channel = grpc.insecure_channel(target, options=opts)
        self._metadata = [("authorization", f"Bearer {auth_token}")] if auth_token else []
        self._deadline_s = deadline_s
        self._max_attempts = max(1, max_attempts)
        self._backoff = (initial_backoff_s, max_backoff_s)
        self.retrieval = retrieval_pb2_grpc.RetrievalServiceStub(self._channel)
        self.kvstore = kvstore_pb2_grpc.KVStoreServiceStub(self._channel)
        self.precompute = precompute_pb2_grpc.PrecomputeServiceStub(self._channel)
        self.blend = blend_pb2_grpc.BlendServiceStub(self._channel)
        self.engine = engine_pb2_grpc.EngineServiceStub(self._channel)

    def close(self):
        self._channel.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    # -- request ids --
    @contextlib.contextmanager
    def request_id(self, request_id):
        """Calls made inside the block send `request_id` (1-64 characters of
        A-Z a-z 0-9 . _ : -, else ValueError) as their x-request-id."""
        if not isinstance(request_id, str) or not _SANE_REQUEST_ID.match(request_id):
            raise ValueError(f"request id {request_id!r}: 1-64 characters of A-Z a-z 0-9 . _ : -")
        token = _REQUEST_ID.set(request_id)
        try:
            yield request_id
        finally:
            _REQUEST_ID.reset(token)

    @property
    def last_request_id(self):
        """The x-request-id of this thread's (or task's) last call, or None."""
        return _LAST_REQUEST_ID.get()

    def _call_metadata(self):
        rid = _REQUEST_ID.get() or "py-" + secrets.token_hex(8)
        _LAST_REQUEST_ID.set(rid)
        return self._metadata + [("x-request-id", rid)]

    # -- plumbing --
    def _call(self, fn, request_factory, deadline_s=None):
        deadline = time.monotonic() + (deadline_s or self._deadline_s)
        backoff = self._backoff[0]
        metadata = self._call_metadata()
        for attempt in range(1, self._max_attempts + 1):
            timeout = max(0.001, deadline - time.monotonic())
            try:
                return fn(request_factory(), timeout=timeout, metadata=metadata)
            except grpc.RpcError as e:
                code = e.code()
                sleep = backoff * random.uniform(0.8, 1.2)
                if (code != grpc.StatusCode.UNAVAILABLE or attempt == self._max_attempts
                        or time.monotonic() + sleep >= deadline):
                    raise error_for(code, e.details()) from None
                time.sleep(sleep)
                backoff = min(backoff * 2, self._backoff[1])

    def _stream(self, fn, request, deadline_s=None):
        """An iterator of server-stream messages; retries UNAVAILABLE before
        the first. The call's request id and deadline are fixed here, when
        the call is made, not when iteration starts."""
        deadline = time.monotonic() + (deadline_s or self._deadline_s)
        metadata = self._call_metadata()
        return self._stream_messages(fn, request, deadline, metadata)

    def _stream_messages(self, fn, request, deadline, metadata):
        backoff = self._backoff[0]
        for attempt in range(1, self._max_attempts + 1):
            got = False
            try:
                for msg in fn(request, timeout=max(0.001, deadline - time.monotonic()),
                              metadata=metadata):
                    got = True
                    yield msg
                return
            except grpc.RpcError as e:
                code = e.code()
                if got or code != grpc.StatusCode.UNAVAILABLE or attempt == self._max_attempts:
                    raise error_for(code, e.details()) from None
                time.sleep(backoff * random.uniform(0.8, 1.2))
                backoff = min(backoff * 2, self._backoff[1])

    # -- retrieval --
    def ingest_documents(self, docs, deadline_s=None):
        """docs: iterable of (doc_id, text) or retrieval_pb2.Document."""
        docs = [d if isinstance(d, retrieval_pb2.Document)
                else retrieval_pb2.Document(doc_id=d[0], text=d[1]) for d in docs]
        return self._call(self.retrieval.IngestDocuments,
                          lambda: iter([retrieval_pb2.IngestDocumentsRequest(document=d)
                                        for d in docs]), deadline_s)

    def delete_document(self, doc_id, deadline_s=None):
        return self._call(self.retrieval.DeleteDocument,
                          lambda: retrieval_pb2.DeleteDocumentRequest(doc_id=doc_id), deadline_s)

    def search(self, text=None, vector=None, k=5, include_content=False, deadline_s=None,
               mode=retrieval_pb2.SEARCH_MODE_SERVER):
        """mode: how a text query is searched (retrieval_pb2.SEARCH_MODE_*)."""
        def req():
            r = retrieval_pb2.SearchRequest(k=k, include_content=include_content, mode=mode)
            if vector is not None:
                r.vector.values.extend(vector)
            else:
                r.text = text or ""
            return r
        return self._call(self.retrieval.Search, req, deadline_s)

    def chunk_documents(self, docs, deadline_s=None):
        """The chunks ingest would make of each document: a DocumentChunks
        per document, its .texts to embed when the server takes the caller's
        vectors (`serve --embedder vectors:DIM`; pass them as
        Document.chunk_vectors)."""
        docs = [d if isinstance(d, retrieval_pb2.Document)
                else retrieval_pb2.Document(doc_id=d[0], text=d[1]) for d in docs]
        return self._call(self.retrieval.ChunkDocuments,
                          lambda: retrieval_pb2.ChunkDocumentsRequest(documents=docs),
                          deadline_s).documents

    def get_chunks(self, chunk_ids, deadline_s=None):
        return self._call(self.retrieval.GetChunks,
                          lambda: retrieval_pb2.GetChunksRequest(chunk_ids=list(chunk_ids)),
                          deadline_s)

    # -- kv store --
    def lookup(self, keys, deadline_s=None):
        return self._call(self.kvstore.Lookup,
                          lambda: kvstore_pb2.LookupRequest(keys=list(keys)), deadline_s)

    def contains(self, keys, deadline_s=None):
        r = self._call(self.kvstore.Contains,
                       lambda: kvstore_pb2.ContainsRequest(keys=list(keys)), deadline_s)
        return list(r.present)

    def get_chunk(self, key, model_fingerprint=b"", deadline_s=None):
        """Returns (KVHeader, [LayerKV])."""
        header, layers = None, []
        for rec in self._stream(self.kvstore.GetChunk,
                                kvstore_pb2.GetChunkRequest(key=key,
                                                            model_fingerprint=model_fingerprint),
                                deadline_s):
            if rec.HasField("header"):
                header = rec.header
            else:
                layers.append(rec.layer)
        return header, layers

    def put_chunk(self, header, layers, deadline_s=None):
        def records():
            yield kvstore_pb2.KVRecord(header=header)
            for layer in layers:
                yield kvstore_pb2.KVRecord(layer=layer)
        return self._call(self.kvstore.PutChunk, records, deadline_s)

    def delete_chunks(self, keys, deadline_s=None):
        return self._call(self.kvstore.DeleteChunks,
                          lambda: kvstore_pb2.DeleteChunksRequest(keys=list(keys)), deadline_s)

    def stats(self, deadline_s=None):
        return self._call(self.kvstore.GetStats, kvstore_pb2.GetStatsRequest, deadline_s)

    # -- precompute --
    def start_job(self, paths, shard_index=0, shard_count=1, workers=0, deadline_s=None,
                  neighbours=0, replace=False):
        """neighbours=k > 0 also writes the neighbour-aware records (Job.neighbour_pass)."""
        return self._call(self.precompute.StartJob, lambda: precompute_pb2.StartJobRequest(
            corpus=precompute_pb2.CorpusSpec(paths=list(paths), shard_index=shard_index,
                                             shard_count=shard_count, neighbours=neighbours,
                                             replace=replace),
            workers=workers), deadline_s)

    def get_job(self, job_id, deadline_s=None):
        return self._call(self.precompute.GetJob,
                          lambda: precompute_pb2.GetJobRequest(job_id=job_id), deadline_s)

    def watch_job(self, job_id, interval_ms=500, deadline_s=3600):
        """An iterator of Job states until a terminal one."""
        return self._stream(self.precompute.WatchJob,
                            precompute_pb2.WatchJobRequest(job_id=job_id, interval_ms=interval_ms),
                            deadline_s)

    def cancel_job(self, job_id, deadline_s=None):
        return self._call(self.precompute.CancelJob,
                          lambda: precompute_pb2.CancelJobRequest(job_id=job_id), deadline_s)

    # -- blend --
    def _collect(self, stream):
        rid = _LAST_REQUEST_ID.get()  # set by _stream for this call
        out = FusedKV()
        for msg in stream:
            part = msg.WhichOneof("part")
            if part == "header":
                out.header = msg.header
            elif part == "layer":
                out.k.append(msg.layer.kv.k)
                out.v.append(msg.layer.kv.v)
                out.masks.append(msg.layer.recomputed_mask)
            elif part == "restart":
                # A chunk's stored KV failed mid-blend: the server blends
                # again with it as a miss and sends layers 0.. again.
                out.k, out.v, out.masks = [], [], []
                out.restarts.append(msg.restart.failed)
            elif part == "summary":
                out.summary = msg.summary
            else:
                raise RagkvError(grpc.StatusCode.INTERNAL,
                                 f"blend stream: unknown message part {part!r} [request_id={rid}]")
        if out.header is None or out.summary is None or \
                len(out.k) != out.header.layout.num_layers:
            raise RagkvError(grpc.StatusCode.INTERNAL, f"blend stream ended early [request_id={rid}]")
        return out

    def blend_segments(self, segments, mode=blend_pb2.BLEND_MODE_CACHEBLEND, ratio=0.0,
                       deadline_s=None):
        """segments: list of int (chunk id), str (text) or list[int] (tokens)."""
        req = blend_pb2.BlendRequest(options=blend_pb2.BlendOptions(
            mode=mode, recompute_ratio=ratio, accept_restart=True))
        for s in segments:
            seg = req.segments.add()
            if isinstance(s, int):
                seg.chunk_id = s
            elif isinstance(s, str):
                seg.text = s
            else:
                seg.tokens.ids.extend(s)
        return self._collect(self._stream(self.blend.Blend, req, deadline_s))

    def retrieve_and_blend(self, query, k=3, mode=blend_pb2.BLEND_MODE_CACHEBLEND, ratio=0.0,
                           system_prompt="", deadline_s=None):
        req = blend_pb2.RetrieveAndBlendRequest(
            query=query, k=k, system_prompt=system_prompt,
            options=blend_pb2.BlendOptions(mode=mode, recompute_ratio=ratio, accept_restart=True))
        return self._collect(self._stream(self.blend.RetrieveAndBlend, req, deadline_s))

    # -- engine --
    def generate(self, question, k=3, mode=blend_pb2.BLEND_MODE_CACHEBLEND, ratio=0.0,
                 max_new_tokens=32, chunk_ids=(), deadline_s=None):
        return self._call(self.engine.Generate, lambda: engine_pb2.GenerateRequest(
            question=question, k=k, chunk_ids=list(chunk_ids), max_new_tokens=max_new_tokens,
            blend=blend_pb2.BlendOptions(mode=mode, recompute_ratio=ratio)), deadline_s)
