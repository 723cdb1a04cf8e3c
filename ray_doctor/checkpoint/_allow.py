"""Which globals a checkpoint pickle may reference: the `weights_only` idea, as data.

A model checkpoint needs tensors, storages, dtypes, sizes and plain containers; anything else
means loading it runs code chosen by whoever wrote the file. The lists mirror what
`torch.load(weights_only=True)` accepts by default, plus the classes torch.distributed.checkpoint
metadata and Ray's own checkpoint bookkeeping are made of (checked only in those files).
"""

from __future__ import annotations

from ray_doctor.checkpoint._pickle import Global

_DTYPES = [
    "float32",
    "float",
    "float64",
    "double",
    "float16",
    "half",
    "bfloat16",
    "complex32",
    "complex64",
    "cfloat",
    "complex128",
    "cdouble",
    "uint8",
    "int8",
    "int16",
    "short",
    "int32",
    "int",
    "int64",
    "long",
    "bool",
    "qint8",
    "quint8",
    "qint32",
    "quint4x2",
    "quint2x4",
    "float8_e4m3fn",
    "float8_e5m2",
    "float8_e4m3fnuz",
    "float8_e5m2fnuz",
    "float8_e8m0fnu",
    "float4_e2m1fn_x2",
    "uint16",
    "uint32",
    "uint64",
    "uint1",
    "uint2",
    "uint3",
    "uint4",
    "uint5",
    "uint6",
    "uint7",
    "int1",
    "int2",
    "int3",
    "int4",
    "int5",
    "int6",
    "int7",
    "bits8",
    "bits16",
    "bits1x8",
    "bits2x4",
    "bits4x2",
]
_STORAGES = [
    "DoubleStorage",
    "FloatStorage",
    "HalfStorage",
    "BFloat16Storage",
    "LongStorage",
    "IntStorage",
    "ShortStorage",
    "CharStorage",
    "ByteStorage",
    "BoolStorage",
    "ComplexFloatStorage",
    "ComplexDoubleStorage",
    "QInt8Storage",
    "QUInt8Storage",
    "QInt32Storage",
    "QUInt4x2Storage",
    "QUInt2x4Storage",
]
_TENSORS = [
    "DoubleTensor",
    "FloatTensor",
    "HalfTensor",
    "BFloat16Tensor",
    "LongTensor",
    "IntTensor",
    "ShortTensor",
    "CharTensor",
    "ByteTensor",
    "BoolTensor",
]
_REBUILD = [
    "_rebuild_tensor",
    "_rebuild_tensor_v2",
    "_rebuild_tensor_v3",
    "_rebuild_parameter",
    "_rebuild_parameter_with_state",
    "_rebuild_qtensor",
    "_rebuild_sparse_tensor",
    "_rebuild_nested_tensor",
    "_rebuild_meta_tensor_no_storage",
    "_rebuild_wrapper_subclass",
    "_rebuild_device_tensor_from_numpy",
    "_rebuild_device_tensor_from_cpu_tensor",
]
_QSCHEMES = [
    "per_tensor_affine",
    "per_tensor_symmetric",
    "per_channel_affine",
    "per_channel_symmetric",
    "per_channel_affine_float_qparams",
]

WEIGHTS = frozenset(
    [
        "collections.OrderedDict",
        "collections.Counter",
        "torch.nn.parameter.Parameter",
        "torch.serialization._get_layout",
        "torch.Size",
        "torch.Tensor",
        "torch.device",
        "_codecs.encode",
        "builtins.bytearray",
        "builtins.set",
        "builtins.frozenset",
        "builtins.complex",
        "torch._tensor._rebuild_from_type_v2",
        "torch.storage.UntypedStorage",
        "torch.storage.TypedStorage",
    ]
    + [f"torch.{d}" for d in _DTYPES]
    + [f"torch.{s}" for s in _STORAGES]
    + [f"torch.{t}" for t in _TENSORS]
    + [f"torch.cuda.{t}" for t in _TENSORS]
    + [f"torch._utils.{f}" for f in _REBUILD]
    + [f"torch.{q}" for q in _QSCHEMES]
)

# torch.distributed.checkpoint's .metadata is itself a pickle of these dataclasses.
DCP = WEIGHTS | frozenset(
    [
        "torch.distributed.checkpoint.metadata.Metadata",
        "torch.distributed.checkpoint.metadata.TensorProperties",
        "torch.distributed.checkpoint.metadata.ChunkStorageMetadata",
        "torch.distributed.checkpoint.metadata.TensorStorageMetadata",
        "torch.distributed.checkpoint.metadata.BytesStorageMetadata",
        "torch.distributed.checkpoint.metadata.MetadataIndex",
        "torch.distributed.checkpoint.metadata.StorageMeta",
        "torch.distributed.checkpoint.metadata._MEM_FORMAT_ENCODING",
        "torch.distributed.checkpoint.filesystem._StorageInfo",
        "pathlib.PosixPath",
        "pathlib.WindowsPath",
        "pathlib.PurePosixPath",
    ]
)

# Ray's own checkpoint bookkeeping (pre-2.7 `.metadata.pkl`, `dict_checkpoint.pkl`).
RAY_BOOKKEEPING_PREFIXES = ("ray.air.", "ray.train.", "ray.tune.")
RAY_BOOKKEEPING_FILES = {".metadata.pkl", ".tune_metadata", "_preprocessor", "dict_checkpoint.pkl"}

# Not on the allowlist is enough to fail; these are named as known code-execution routes.
DANGEROUS_MODULES = (
    "os", "posix", "nt", "subprocess", "sys", "builtins", "__builtin__", "shutil", "socket",
    "importlib", "runpy", "pickle", "_pickle", "cloudpickle", "dill", "code", "codeop",  # safe: names to flag
    "pty", "ctypes", "marshal", "types", "webbrowser", "requests", "urllib", "http", "asyncio",
    "multiprocessing", "threading", "signal", "platform", "functools", "operator", "io", "_io",
    "tempfile", "glob", "zipfile", "tarfile", "<computed>",
    "<copyreg extension>",
)  # fmt: skip


def allowed(ref: Global, allowlist: frozenset[str], ray_bookkeeping: bool = False) -> bool:
    if ref.dotted in allowlist:
        return True
    return ray_bookkeeping and ref.module.startswith(RAY_BOOKKEEPING_PREFIXES)


def dangerous(ref: Global) -> bool:
    root = ref.module.split(".")[0]
    return root in DANGEROUS_MODULES
