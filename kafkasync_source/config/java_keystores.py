"""Java truststores and keystores, as a ``format("kafka")`` user writes them, turned into the PEM
text librdkafka takes.

The Java consumer behind ``format("kafka")`` reads ``ssl.truststore.location`` and
``ssl.keystore.location`` as JKS (its default type) or PKCS12 files, opened with
``ssl.truststore.password`` / ``ssl.keystore.password`` and ``ssl.key.password`` (Kafka's
``SslConfigs``), in every process that creates a client: the driver and each executor, by the
path as given. librdkafka (OpenSSL) reads neither a truststore nor a JKS file; it takes the
trusted CA certificates as ``ssl.ca.pem`` and the client's certificate and private key as
``ssl.certificate.pem`` and ``ssl.key.pem`` (librdkafka's CONFIGURATION.md; every certificate of
``ssl.ca.pem`` is read since librdkafka 2.0, PR #4049, and the chain of ``ssl.certificate.pem``
is sent since 2.8, PR #4894).

Where a store is read, and so where its private key travels (java_client_settings.py decides):

* An absolute path is read here, on the driver, at query start; its certificates and key
  become part of the query's client settings, which are pickled into every task Spark sends to
  the executors. The key thus travels over Spark's RPC, and Spark's block manager may write it
  to local disk with the task binaries and broadcast blocks, on the driver and the executors:
  in the clear unless ``spark.network.crypto.enabled=true`` (AES-based RPC encryption, which
  needs ``spark.authenticate=true``) and ``spark.io.encryption.enabled=true`` (local storage
  encryption) are set, as docs/reference/client-settings.md recommends.
* A relative path — a file shipped with ``--files`` / ``spark.files``, which Spark places in
  each executor's working directory — is read by each process that creates a client, from its
  working directory or else from Spark's files directory (:func:`_spark_files_directory`), as
  the Java client reads it; the tasks carry its path and passwords, as they carry every other
  client secret, and no key. Each process reads a store once per version of the file
  (:func:`_read_cached`).

Besides, a JKS store is copied to PKCS12 by keytool into a temporary file, in a directory only
this user can read, removed at once.

What reads the files: PKCS12 with ``cryptography`` (OpenSSL's PKCS12 parser); JKS and JCEKS
with the JDK's own ``keytool -importkeystore`` into PKCS12 first — the JDK that runs Spark has
it, it reads every store the Java client reads, and no Python JKS reader is maintained without
a C extension to compile (``pyjks`` needs ``twofish``, an sdist). The file's format is told by
its first bytes, as the JDK's ``keystore.type.compat`` does, so a store whose ``type`` says JKS
but that is PKCS12 (Java 9+'s default) is read all the same.

The passwords and the private key are secrets: no message here carries them (only option
names and paths), keytool gets its passwords through its environment, never its command line,
and ``ssl.key.pem`` is masked wherever kafkasync shows client settings (client_config.redact).
"""

from __future__ import annotations

import functools
import os
import re
import secrets
import shutil
import subprocess
import tempfile
from dataclasses import dataclass, field
from typing import Optional

_JKS_MAGIC = b"\xfe\xed\xfe\xed"
_JCEKS_MAGIC = b"\xce\xce\xce\xce"
_KEYTOOL_TIMEOUT_S = 60


class JavaKeystoreError(ValueError):
    """A truststore or keystore cannot be read; the message names the option and the file."""


@dataclass(frozen=True)
class StoreContents:
    """A store's certificates and key as PEM text."""

    certificates: tuple[str, ...]
    """Trusted certificates (a truststore), or the key's chain, its own certificate first."""
    private_key: Optional[str] = field(default=None, repr=False)
    """The key as PEM text: a secret, kept out of the repr (logs, tracebacks)."""


def truststore_as_pem(location: str, password: Optional[str], declared_type: Optional[str]) -> str:
    """The trusted certificates of ``ssl.truststore.location`` as one PEM text for ``ssl.ca.pem``."""
    contents = _read_store("ssl.truststore", location, password, None, declared_type)
    if not contents.certificates:
        raise JavaKeystoreError(
            f"Option 'kafka.ssl.truststore.location': {location} holds no certificate to trust.")
    return "".join(contents.certificates)


def keystore_as_pem(location: str, password: Optional[str], key_password: Optional[str],
                    declared_type: Optional[str]) -> tuple[str, str]:
    """(``ssl.certificate.pem``, ``ssl.key.pem``): the client's certificate chain and private key
    from ``ssl.keystore.location``, which must hold exactly one private key (the Java client's
    key manager picks one of several by what the broker asks for, which librdkafka cannot).
    A key from a JKS or PKCS12 store comes unencrypted; from a PEM store, as written."""
    contents = _read_store("ssl.keystore", location, password, key_password, declared_type)
    if contents.private_key is None or not contents.certificates:
        raise JavaKeystoreError(
            f"Option 'kafka.ssl.keystore.location': {location} holds no private key with its "
            "certificate; a client keystore holds the client's key and certificate (a file of "
            "trusted certificates is 'kafka.ssl.truststore.location').")
    return "".join(contents.certificates), contents.private_key


def _read_store(option: str, location: str, password: Optional[str], key_password: Optional[str],
                declared_type: Optional[str]) -> StoreContents:
    declared = (declared_type or "").strip().upper()
    if declared not in ("", "JKS", "PKCS12", "JCEKS", "PEM"):
        raise JavaKeystoreError(
            f"Option 'kafka.{option}.type' is {declared_type!r}; kafkasync reads JKS, PKCS12 and "
            "JCEKS stores, and PEM files with type PEM.")
    path = _local_path(option, location)
    if declared == "PEM":
        return _pem_file_contents(option, location, path)
    try:
        with open(path, "rb") as handle:
            head = handle.read(4)
        stat = os.stat(path)
    except OSError as err:
        raise JavaKeystoreError(
            f"Option 'kafka.{option}.location': cannot read {path} ({err.strerror}); "
            f"{_where_read(location)}.") from None
    kind = _store_kind(head)
    return _read_cached(option, path, stat.st_mtime_ns, stat.st_size, kind, password, key_password)


def _where_read(location: str) -> str:
    """Which processes read ``location``, for a message saying where the file must be."""
    if os.path.isabs(location):
        return ("a store given by an absolute path is read once, on the driver, when the query "
                "starts, and its contents go to the executors: the file must be readable there")
    return ("a store given by a relative path (a file shipped with --files or spark.files) is read "
            "by the driver and by every executor, as the Java client reads it: each needs the file "
            "in its working directory or in Spark's files directory")


def _local_path(option: str, location: str) -> str:
    """The file ``location`` names in this process. A relative path is looked up where Spark
    puts a file shipped with ``--files`` / ``spark.files``: the working directory of each
    executor (Spark's docs on ``--files``; an executor's SparkFiles root is "."), else Spark's
    files directory, a temporary directory on the driver and in local mode (SparkEnv's
    ``driverTmpDir``)."""
    if os.path.isabs(location):
        return location
    working, spark_files = os.getcwd(), _spark_files_directory()
    for directory in (working, spark_files):
        if directory is not None and os.path.exists(os.path.join(directory, location)):
            return os.path.join(directory, location)
    raise JavaKeystoreError(
        f"Option 'kafka.{option}.location': {location} is neither in this process's working directory "
        f"({working})" + (f" nor in Spark's files directory ({spark_files})" if spark_files else "")
        + f"; {_where_read(location)}.")


def _spark_files_directory() -> Optional[str]:
    """Spark's files directory in this process, or None outside Spark. pyspark tells its Python
    workers (data source planning on the driver, tasks on executors) the directory when they
    start (worker_util.setup_spark_files); a driver's own Python process asks its SparkContext.
    ``SparkFiles.getRootDirectory()`` fails by assertion outside both, hence the checks."""
    try:
        from pyspark import SparkFiles
    except ImportError:  # Spark Connect's pure-Python client has no SparkFiles
        return None
    if SparkFiles._is_running_on_worker:
        return SparkFiles._root_directory
    if SparkFiles._sc is not None:
        return SparkFiles.getRootDirectory()
    return None


_PEM_BLOCK = re.compile(r"-----BEGIN (?P<label>[A-Z0-9 ]+)-----.+?-----END (?P=label)-----\s*", re.S)


def _pem_file_contents(option: str, location: str, path: str) -> StoreContents:
    """A PEM store (KIP-651's ``ssl.truststore.type=PEM`` / ``ssl.keystore.type=PEM``): its
    certificates, and its private key as written (``ssl.key.password`` decrypts an encrypted
    one, in librdkafka as in the Java client)."""
    try:
        with open(path) as handle:
            text = handle.read()
    except (OSError, UnicodeDecodeError) as err:
        raise JavaKeystoreError(
            f"Option 'kafka.{option}.location': cannot read {path} as a PEM file "
            f"({getattr(err, 'strerror', None) or type(err).__name__}); {_where_read(location)}."
        ) from None
    blocks = [(m.group("label"), m.group(0).strip() + "\n") for m in _PEM_BLOCK.finditer(text)]
    keys = [block for label, block in blocks if label.endswith("PRIVATE KEY")]
    if len(keys) > 1:
        raise JavaKeystoreError(f"Option 'kafka.{option}.location': {path} holds more than one private key.")
    return StoreContents(tuple(block for label, block in blocks if label == "CERTIFICATE"),
                         keys[0] if keys else None)


def _store_kind(head: bytes) -> str:
    if head == _JKS_MAGIC:
        return "JKS"
    if head == _JCEKS_MAGIC:
        return "JCEKS"
    return "PKCS12"


@functools.lru_cache(maxsize=16)
def _read_cached(option: str, location: str, _mtime_ns: int, _size: int, kind: str,
                 password: Optional[str], key_password: Optional[str]) -> StoreContents:
    """A store read once per process and version of the file: Spark asks the source for its
    options several times per query start, every client of a store given by a relative path
    reads it where it is created, and a JKS store costs a keytool run (a JVM)."""
    if kind == "PKCS12":
        with open(location, "rb") as handle:
            data = handle.read()
        return _pkcs12_contents(option, location, data, password, key_password)
    return _java_store_contents(option, location, kind, password, key_password)


def _pkcs12_contents(option: str, location: str, data: bytes, password: Optional[str],
                     key_password: Optional[str]) -> StoreContents:
    from cryptography.hazmat.primitives.serialization import (
        Encoding,
        NoEncryption,
        PrivateFormat,
        pkcs12,
    )

    # PKCS12 protects keys and certificates with one password; Java's keytool refuses a key
    # password that differs from the store's, but a store made elsewhere may use the key's.
    candidates = [password] + ([key_password] if key_password not in (None, password) else [])
    failure: Exception = ValueError("no password")
    for candidate in candidates:
        try:
            parsed = pkcs12.load_pkcs12(data, candidate.encode() if candidate is not None else None)
            break
        except ValueError as err:
            failure = err
    else:
        raise JavaKeystoreError(
            f"Option 'kafka.{option}.location': {location} could not be opened as a PKCS12 store "
            f"with 'kafka.{option}.password'"
            + (" (none was given)" if password is None else "") + f": {_reason(failure)}."
        ) from None
    chain = ([parsed.cert.certificate] if parsed.cert is not None else []) + [
        extra.certificate for extra in parsed.additional_certs]
    certificates = tuple(certificate.public_bytes(Encoding.PEM).decode() for certificate in chain)
    key = parsed.key.private_bytes(Encoding.PEM, PrivateFormat.PKCS8, NoEncryption()).decode() \
        if parsed.key is not None else None
    return StoreContents(certificates, key)


def _reason(err: Exception) -> str:
    """cryptography's reason, which names neither the password nor the key."""
    return str(err).split("\n")[0] or type(err).__name__


def _java_store_contents(option: str, location: str, kind: str, password: Optional[str],
                         key_password: Optional[str]) -> StoreContents:
    """A JKS or JCEKS store, copied into PKCS12 by the JDK's keytool in a private temporary
    directory, then read as PKCS12."""
    if password is None:
        raise JavaKeystoreError(
            f"Option 'kafka.{option}.password' is required to read the {kind} store {location}.")
    keytool = _keytool(option, location)
    copy_password = secrets.token_urlsafe(24)
    environment = {**os.environ, "KAFKASYNC_SRC_PASS": password, "KAFKASYNC_DEST_PASS": copy_password,
                   "KAFKASYNC_KEY_PASS": key_password or password}
    source = [keytool, "-J-Duser.language=en", "-srckeystore", location, "-srcstoretype", kind,
              "-srcstorepass:env", "KAFKASYNC_SRC_PASS"]
    if key_password not in (None, password):
        # keytool takes a key password of its own only with the alias of that key.
        alias = _private_key_alias(option, location, kind, keytool, environment)
        source += ["-srcalias", alias, "-srckeypass:env", "KAFKASYNC_KEY_PASS",
                   "-destkeypass:env", "KAFKASYNC_DEST_PASS"]
    with tempfile.TemporaryDirectory(prefix="kafkasync-keystore-") as private:  # mode 0700
        copy = os.path.join(private, "store.p12")
        result = _run_keytool(option, location, [
            *source[:2], "-importkeystore", "-noprompt", *source[2:], "-destkeystore", copy,
            "-deststoretype", "PKCS12", "-deststorepass:env", "KAFKASYNC_DEST_PASS"], environment)
        if result.returncode != 0 or not os.path.exists(copy):
            raise _keytool_failure(option, location, kind, key_password, result)
        with open(copy, "rb") as handle:
            data = handle.read()
    return _pkcs12_contents(option, location, data, copy_password, None)


def _private_key_alias(option: str, location: str, kind: str, keytool: str, environment: dict[str, str]) -> str:
    result = _run_keytool(option, location, [keytool, "-J-Duser.language=en", "-list", "-v", "-keystore", location,
                                             "-storetype", kind, "-storepass:env", "KAFKASYNC_SRC_PASS"], environment)
    if result.returncode != 0:
        raise _keytool_failure(option, location, kind, None, result)
    aliases = [alias for alias, entry_type in _listed_entries(result.stdout) if entry_type == "PrivateKeyEntry"]
    if len(aliases) != 1:
        raise JavaKeystoreError(
            f"Option 'kafka.{option}.location': {location} holds {len(aliases)} private keys; kafkasync "
            "gives librdkafka one client key, so the keystore must hold exactly one.")
    return aliases[0]


# keytool -list -v (in English) prints each entry as "Alias name: ...", "Creation date: ...",
# "Entry type: ..." and its certificates, and ends each entry with two lines of asterisks.
_LISTING_SEPARATOR = re.compile(r"^\*{10,}\r?$", re.M)
_LISTED_ALIAS = re.compile(r"^Alias name: (.*?)\r?$", re.M)
_LISTED_ENTRY_TYPE = re.compile(r"^Entry type: (.*?)\r?$", re.M)


def _listed_entries(listing: str) -> list[tuple[str, str]]:
    """(alias, entry type) of each entry of a ``keytool -list -v`` listing, read entry by entry:
    a pattern spanning entries gave a key the alias of a trustedCertEntry listed before it
    (Confluent's usual ``CARoot``; keytool lists entries in alias order)."""
    entries = []
    for entry in _LISTING_SEPARATOR.split(listing):
        alias, entry_type = _LISTED_ALIAS.search(entry), _LISTED_ENTRY_TYPE.search(entry)
        if alias is not None and entry_type is not None:
            entries.append((alias.group(1), entry_type.group(1).strip()))
    return entries


def _run_keytool(option: str, location: str, command: list[str], environment: dict[str, str]
                 ) -> subprocess.CompletedProcess:
    """keytool with its passwords in ``environment`` (``-storepass:env``), never on its command
    line, where other users of the machine could read them; stopped after
    :data:`_KEYTOOL_TIMEOUT_S` (a store on a hung network mount, a JVM that does not start), so
    that a query start or a task fails saying why instead of waiting forever."""
    try:
        return subprocess.run(command, env=environment, capture_output=True, text=True, stdin=subprocess.DEVNULL,
                              timeout=_KEYTOOL_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        raise JavaKeystoreError(
            f"Option 'kafka.{option}.location': keytool did not finish reading {location} within "
            f"{_KEYTOOL_TIMEOUT_S} s and was stopped ({command[0]}). A file on a slow or unreachable "
            "file system, or a JVM that cannot start, holds keytool up; a store converted once to "
            "PKCS12 ('keytool -importkeystore -deststoretype PKCS12') is read without keytool."
        ) from None


def _keytool_failure(option: str, location: str, kind: str, key_password: Optional[str],
                     result: subprocess.CompletedProcess) -> JavaKeystoreError:
    said = " ".join(line.strip() for line in (result.stdout + result.stderr).splitlines()
                    if "error" in line.lower())[:500]
    return JavaKeystoreError(
        f"Option 'kafka.{option}.location': keytool could not read the {kind} store {location} with "
        f"'kafka.{option}.password'" + (" and 'kafka.ssl.key.password'" if key_password is not None else "")
        + f": {said or 'exit status ' + str(result.returncode)}.")


def _keytool(option: str, location: str) -> str:
    """The JDK's keytool: on PATH, else in JAVA_HOME (Spark's launcher finds Java the same way)."""
    found = shutil.which("keytool")
    java_home = os.environ.get("JAVA_HOME")
    if found is None and java_home and os.access(os.path.join(java_home, "bin", "keytool"), os.X_OK):
        found = os.path.join(java_home, "bin", "keytool")
    if found is None:
        raise JavaKeystoreError(
            f"Option 'kafka.{option}.location': reading the JKS or JCEKS store {location} needs the "
            "JDK's keytool (on PATH or in JAVA_HOME/bin) in the process that reads it (the driver; "
            "every executor too for a store given by a relative path); none was found. Convert the "
            "store to PKCS12 once with 'keytool -importkeystore -deststoretype PKCS12', which "
            "kafkasync reads without it.")
    return found
