"""storage-unreachable: cluster storage could not be set up, written or synced."""

from __future__ import annotations

import re
from collections.abc import Iterator

from ray_doctor.findings import Finding, Severity
from ray_doctor.model import Evidence, Experiment, Failure
from ray_doctor.rules._base import Precedence, subject_name
from ray_doctor.rules._signature import (
    Hit,
    Signature,
    SignatureRule,
    mentions,
    search,
    signatures,
    wording,
)
from ray_doctor.rules.disk_full import FULL
from ray_doctor.storage import is_uri

ARROW_S3 = "pyarrow S3FileSystem (arrow/cpp/src/arrow/filesystem/s3fs.cc), used by Ray storage"
UNREACHABLE = signatures(
    wording(
        "storage set-up",
        r"Unable to set up cluster storage",
        "Ray Train/Tune StorageContext (python/ray/train/_internal/storage.py)",
        "Ray 2.7-2.60",
        "RuntimeError: Unable to set up cluster storage with the following settings: "
        "StorageContext<...>",
    ),
    wording(
        "no shared access",
        r"Check that all nodes in the cluster have read/write access",
        "Ray Train/Tune StorageContext",
        "Ray 2.7-2.60",
        "Check that all nodes in the cluster have read/write access to the configured storage "
        "path.",
    ),
    wording(
        "sync failed",
        # (Not a device's: Ascend's runtime says "Sync get device msg failed".)
        r"(?:[Ss]ync(?:ing)?|[Uu]pload(?:ing)?) (?:(?!device)[^\n]){0,80}?(?:failed|timed out)|"
        r"Could not upload checkpoint|"
        # Tune 1.13's syncer giving up says only this (2.x adds the error on the next line).
        r"Failed sync even after \d+ retries",
        "Ray Tune syncer (python/ray/tune/syncer.py, ray/train/_internal/syncer.py)",
        "Ray 1.x-2.60",
        "Syncing experiment checkpoint to cloud failed: timed out",
    ),
    wording(
        "checkpoint not synced to the driver",
        r"not found after successful sync down",
        "Ray Tune 0.8-1.x moving a trial's checkpoint between nodes with rsync (tune/trial.py)",
        "Ray 0.8-1.x",
        "ray.tune.error.TuneError: Trial train_01b19_00013: Checkpoint path /home/ray/ray_results/"
        "exp/train_01b19_00013/checkpoint_000096/ not found after successful sync down. Are you "
        "running on a Kubernetes or managed cluster?",
    ),
    wording(
        "object store denied",
        # The names arrow's S3ErrorToString gives the AWS SDK's errors of access, credentials
        # and reachability (cpp/src/arrow/filesystem/s3_internal.h).
        r"AWS Error (?:ACCESS_DENIED|NETWORK_CONNECTION|NO_SUCH_BUCKET|UNKNOWN|"
        r"INVALID_ACCESS_KEY_ID|SIGNATURE_DOES_NOT_MATCH|INVALID_CLIENT_TOKEN_ID|"
        r"MISSING_AUTHENTICATION_TOKEN|UNRECOGNIZED_CLIENT|REQUEST_EXPIRED|"
        r"REQUEST_TIME_TOO_SKEWED|INVALID_SIGNATURE|SERVICE_UNAVAILABLE|THROTTLING|SLOW_DOWN|"
        r"REQUEST_TIMEOUT|INTERNAL_FAILURE)\b|Forbidden: 403|"
        # The same errors as older pyarrow printed them, by the AWS SDK's number:
        # ACCESS_DENIED 15, SIGNATURE_DOES_NOT_MATCH 22, INVALID_ACCESS_KEY_ID 23,
        # NETWORK_CONNECTION 99, UNKNOWN 100 (NO_SUCH_KEY and the like are a path, not access).
        r"AWS Error \[code (?:15|22|23|99|100)\]|"
        r"google\.api_core\.exceptions\.Forbidden",
        ARROW_S3 + "; google-cloud-storage",
        "pyarrow 2-26",
        "OSError: When listing objects under key 'ckpt/' in bucket 'bucket': AWS Error "
        "ACCESS_DENIED during ListObjectsV2 operation: Access Denied",
    ),
    wording(
        "GCS permission",
        r"does not have storage\.(?:objects|buckets)\.\w+ access",
        "Google Cloud Storage JSON API error text (through gcsfs / google-cloud-storage)",
        "any",
        "google.api_core.exceptions.Forbidden: 403 GET https://storage.googleapis.com/storage/v1/"
        "b/bucket/o: ray-sa@proj.iam.gserviceaccount.com does not have storage.objects.list "
        "access to the Google Cloud Storage bucket.",
    ),
    wording(
        "GCS credentials",
        r"google\.auth\.exceptions\.(?:RefreshError|DefaultCredentialsError)|"
        r"Could not automatically determine credentials|Your default credentials were not found|"
        r"from the Google Compute Engine ?metadata service",
        "google-auth (google/auth/_default.py, compute_engine/credentials.py), through gcsfs / "
        "google-cloud-storage",
        "google-auth 1.x-2.x",
        "google.auth.exceptions.RefreshError: Failed to retrieve http://metadata.google.internal/"
        "computeMetadata/v1/instance/service-accounts/default/?recursive=true from the Google "
        "Compute Engine metadata service. Compute Engine Metadata server unavailable",
    ),
    wording(
        "TensorFlow GCS client refused",
        r"Error executing an HTTP request(?::| \() ?HTTP response code 40[13]\b",
        "TensorFlow's GCS file system (tensorflow/core/platform/cloud/curl_http_request.cc; "
        "'(HTTP response code 403, error code 0, ...)' before TF 1.5)",
        "TensorFlow 1.x-2.x",
        "tensorflow.python.framework.errors_impl.PermissionDeniedError: Error executing an HTTP "
        'request: HTTP response code 403 with body \'{ "error": { "code": 403, ...\'',
    ),
    wording(
        "S3 credentials",
        r"NoCredentialsError|Unable to locate credentials|InvalidAccessKeyId|"
        r"An error occurred \((?:AccessDenied|NoSuchBucket|403)\) when calling",
        "botocore / boto3 (the AWS SDK for Python)",
        "botocore 1.x",
        "botocore.exceptions.ClientError: An error occurred (AccessDenied) when calling the "
        "PutObject operation: Access Denied",
    ),
    wording(
        "S3 endpoint unreachable",
        # Only an S3 endpoint: the same error for EC2 or STS is the cluster launcher's.
        r"Could not connect to the endpoint URL: \"?https?://[^/\"\s]*\bs3\b",
        "botocore's EndpointConnectionError (botocore/exceptions.py), through boto3, s3fs, "
        "Lightning and Tune's S3 syncing",
        "botocore 1.x",
        "botocore.exceptions.EndpointConnectionError: Could not connect to the endpoint URL: "
        '"https://my-bucket.s3.us-west-2.amazonaws.com/runs/exp1/checkpoint_000003/model.pt"',
    ),
    wording(
        "Determined checkpoint storage",
        r"Checkpoint storage validation failed",
        "Determined's trial harness, validating `checkpoint_storage` before training "
        "(harness/determined/exec/harness.py)",
        "Determined 0.x",
        "root: Checkpoint storage validation failed: [Errno 13] Permission denied: "
        "'/determined_shared_fs/261390dd-c308-4ce3-ac99-77d52f744f8b'",
    ),
)


# Ray's storage functions: an error raised inside them is the storage path failing to answer.
# ray/train/_internal/storage.py (Ray 2.7-2.60); ray/tune/syncer.py and trainable.py's cloud
# upload (Ray 1.x-2.6).
RAY_STORAGE_CALLS = {
    "_sync_trial_checkpoint",
    "_maybe_save_to_cloud",
    "sync_up",
    "sync_down",
    "sync_up_to_cloud",
    "_check_validation_file",
    "_create_validation_file",
    "_exists_at_fs_path",
    "persist_current_checkpoint",
    "_upload_to_fs_path",
    "_download_from_fs_path",
    "_pyarrow_fs_copy_files",
    "_list_at_fs_path",
}
STORAGE_FRAMES = Signature(
    "Ray storage call failed", re.compile(r".*"), "Ray Train/Tune storage", "Ray 2.7-2.60"
)
# Bugs of the libraries between the run and its storage, not an unreachable storage: pyarrow's
# fsspec bridge rejecting what a filesystem library returned (pyarrow/fs.py), and Ray 1.x
# Tune's sync client used after it was closed (tune/sync_client.py, ray #13256, #17506).
# A process out of file descriptors (EMFILE) fails whatever opens a file or a socket next.
OUT_OF_FDS = signatures(("out of file descriptors", r"Too many open files|\[Errno 24\]"))
FS_LIBRARY_BUG = (
    signatures(
        ("fsspec path outside base dir", r"which is outside base dir"),
        ("Tune sync client closed", r"\[internalerror\] The client has been closed"),
    )
    + OUT_OF_FDS
)  # the sync could not even start its command (ray #12227): storage never asked


class StorageUnreachable(SignatureRule):
    """The run could not use its storage_path: set-up failed, uploads failed, or nodes do not share it.

    Symptom:
        "RuntimeError: Unable to set up cluster storage with the following settings: …
        Check that all nodes in the cluster have read/write access to the configured storage
        path", sync or upload failures, access-denied errors from S3 or GCS; or a multi-node
        run whose storage_path is a local path.
    Likely cause:
        `storage_path` is a local directory on the head node and workers on other nodes cannot
        see it (Ray 2.7+ writes checkpoints from the workers directly), the bucket or NFS
        mount is missing or not writable from every node, or the credentials lack rights.
    Evidence it uses:
        Ray's storage error text in error.txt or the logs; an error raised inside Ray's own
        storage calls (the traceback's frames: `persist_current_checkpoint`,
        `_check_validation_file`, Ray 1.x's `_maybe_save_to_cloud`, ...) when the message was
        lost; for the multi-node case, the `node_ip` each trial reported and whether
        storage_path is a local path. A sync that failed on a full disk is `disk-full`'s.
    Fix:
        Use storage every node can reach: `RunConfig(storage_path="s3://bucket/path")` (or
        `gs://`, or a shared NFS path mounted at the same place on every node), and check that
        each node can write there (credentials, bucket policy, mount options).
    References:
        - https://docs.ray.io/en/latest/train/user-guides/persistent-storage.html
        - https://docs.ray.io/en/latest/tune/tutorials/tune-storage.html
    """

    specificity = Precedence.ENVIRONMENT
    id = "storage-unreachable"
    title = "Storage not reachable"
    severity = Severity.ERROR
    commands = ("inspect", "smoke")
    example = "fixtures/tune_storage_unreachable"
    signatures = UNREACHABLE

    def search_failure(self, failure: Failure) -> Hit | None:
        hit = super().search_failure(failure)
        if hit is not None:
            return hit
        # An error raised inside Ray's own storage layer (a pasted traceback often loses the
        # message after "OSError: When ..."): the frames say where it failed.
        frame = next((f for f in failure.frames if f.function in RAY_STORAGE_CALLS), None)
        if frame is None:
            return None
        where = f"{frame.function} in Ray's storage layer raised {failure.exc_type}"
        line = failure.exc_line or Evidence(frame.file, frame.line, where)
        match = STORAGE_FRAMES.pattern.match(where)
        return Hit(STORAGE_FRAMES, match, line, failure) if match else None

    def excluded(self, experiment: Experiment, failure: Failure | None) -> bool:
        # A sync or upload that failed because the volume is full is disk-full's: the
        # storage was reached. The trials' own errors say so as often as the driver's log.
        if mentions(experiment, failure, FULL) or mentions(experiment, failure, FS_LIBRARY_BUG):
            return True
        return failure is None and any(
            search(FULL, f) for trial in experiment.trials for f in trial.failures
        )

    def explain(self, experiment: Experiment, hit: Hit) -> tuple[str, str]:
        message = (
            f"{subject_name(experiment, hit.trial)} could not use its storage path "
            f"({hit.signature.label}: {hit.evidence.excerpt})."
        )
        return message, self._fix()

    @staticmethod
    def _fix() -> str:
        return (
            'Use storage every node can read and write: `RunConfig(storage_path="s3://bucket/'
            'path")`, `gs://…`, or an NFS path mounted at the same place on all nodes; check '
            "credentials and permissions from a worker node."
        )

    def check(self, experiment: Experiment) -> Iterator[Finding]:
        yield from super().check(experiment)
        nodes = {
            t.last_result["node_ip"]
            for t in experiment.trials
            if isinstance(t.last_result.get("node_ip"), str)
        }
        has_checkpoints = any(t.checkpoints for t in experiment.trials)
        if len(nodes) > 1 and not is_uri(experiment.path) and has_checkpoints:
            yield self.finding(
                experiment,
                f"Trials ran on {len(nodes)} nodes ({', '.join(sorted(nodes)[:4])}) but storage is "
                f"the local path {experiment.path}: checkpoints written on other nodes are not "
                "here unless it is a shared mount.",
                self._fix(),
                [Evidence(experiment.path, None, f"node_ip values: {', '.join(sorted(nodes))}")],
                subject=f"storage:{experiment.path}",
                severity=Severity.WARNING,
            )
