"""What a read costs, sampled while it runs: the bytes a broker sent, the CPU seconds each kind
of process used, the peak memory of Spark's Python source runner.

Each sampler is a context manager around a read. A figure read only after the read would miss
what ends with it (a process that exits with its query, a connection that closes), so each samples
in a thread every ``interval_s`` while the read goes on, keeping what it saw.
Everything is read from Linux's ``/proc`` and ``ss`` (iproute2): these run on Linux only.
"""

from __future__ import annotations

import os
import re
import subprocess
import threading
import time
from typing import Optional, TypeVar

RUNNER_COMMAND = b"python_streaming_source_runner"
"""In the command line of Spark's Python streaming source runner
(``pyspark.sql.streaming.python_streaming_source_runner``), the process where a Python data
source's driver side runs: kafkasync plans there (``latestOffset``, ``partitions``, ``commit``)."""

_Sampler = TypeVar("_Sampler", bound="PeriodicSampler")


class PeriodicSampler:
    """Samples something when entered, every ``interval_s`` in a thread while a run goes on, and
    once more when left: what a figure read only after the run would miss (a process that
    exited with its query, a connection closed) is seen while it lasts."""

    def __init__(self, interval_s: float) -> None:
        self._interval_s = interval_s
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name=type(self).__name__, daemon=True)
        self.sampler_cpu_s = 0.0
        """CPU seconds the sampling thread used (to take out of its own process's figure)."""

    def __enter__(self: _Sampler) -> _Sampler:
        self._begin()
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()
        self._sample()

    def _begin(self) -> None:
        self._sample()

    def _run(self) -> None:
        started = time.thread_time()
        while not self._stop.wait(self._interval_s):
            self._sample()
        self.sampler_cpu_s = time.thread_time() - started

    def _sample(self) -> None:
        raise NotImplementedError


_CONNECTION = re.compile(r"^\S+\s+\S+\s+(\S+)\s+(\S+)")  # Recv-Q Send-Q local peer
_BYTES_SENT = re.compile(r"bytes_sent:(\d+)")


class BrokerBytesSampler(PeriodicSampler):
    """Bytes a broker sent: ``bytes_sent`` of every TCP connection whose local port is the
    broker's (``ss -tin``, Linux tcp_info), the largest value seen per connection summed, counted
    from when the sampler was entered. A connection that closes between two samples loses at
    most its last ``interval_s``."""

    def __init__(self, port: int, interval_s: float = 0.1) -> None:
        super().__init__(interval_s)
        self._port = port
        self._sent: dict[tuple[str, str], int] = {}
        self._baseline: dict[tuple[str, str], int] = {}

    def _begin(self) -> None:
        self._sample()  # connections open before the run: count only what they send from now
        self._baseline = dict(self._sent)
        self._sent.clear()

    @property
    def bytes_sent(self) -> int:
        return sum(sent - self._baseline.get(key, 0) for key, sent in self._sent.items())

    def _sample(self) -> None:
        output = subprocess.run(
            ["ss", "-tinH", "state", "established", f"( sport = :{self._port} )"],
            capture_output=True, text=True, check=True,
        ).stdout
        connection: Optional[tuple[str, str]] = None
        for line in output.splitlines():
            found = _CONNECTION.match(line)
            if found and not line.startswith((" ", "\t")):
                connection = (found.group(1), found.group(2))
                continue
            sent = _BYTES_SENT.search(line)
            if connection is not None and sent:
                self._sent[connection] = max(self._sent.get(connection, 0), int(sent.group(1)))
                connection = None


def broker_bytes_unavailable() -> Optional[str]:
    """Why :class:`BrokerBytesSampler` cannot run here, or None."""
    if subprocess.run(["ss", "-V"], capture_output=True).returncode != 0:
        return "ss (iproute2) is not installed"
    return None


def status_kib(pid: int, *fields: str) -> dict[str, int]:
    """Fields of ``/proc/<pid>/status`` in KiB (``VmRSS``, ``VmHWM``, ``RssAnon``...)."""
    found: dict[str, int] = {}
    with open(f"/proc/{pid}/status") as status:
        for line in status:
            name = line.split(":", 1)[0]
            if name in fields:
                found[name] = int(line.split()[1])
    return found


def peak_rss_bytes(pid: int) -> int:
    """``VmHWM``: the process's peak resident set size."""
    peak = status_kib(pid, "VmHWM")
    if "VmHWM" not in peak:
        raise RuntimeError(f"no VmHWM in /proc/{pid}/status")
    return peak["VmHWM"] * 1024


class Process:
    """One process of the machine as ``/proc`` showed it: parent, command line, ``stat`` fields."""

    def __init__(self, parent: int, command: bytes, stat: list[str]) -> None:
        self.parent, self.command, self.stat = parent, command, stat

    @property
    def cpu_seconds(self) -> float:
        """User and system CPU seconds so far (``utime`` + ``stime``)."""
        return (int(self.stat[11]) + int(self.stat[12])) / os.sysconf("SC_CLK_TCK")


def processes() -> dict[int, Process]:
    """Every process of the machine, by pid (those that exit while being read are left out)."""
    found: dict[int, Process] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/cmdline", "rb") as cmdline:
                command = cmdline.read()
            with open(f"/proc/{entry}/stat") as stat:
                fields = stat.read().rsplit(")", 1)[1].split()
        except OSError:  # exited meanwhile
            continue
        found[int(entry)] = Process(int(fields[1]), command, fields)
    return found


def descends_from(table: dict[int, Process], pid: int, ancestor: int) -> bool:
    """Whether ``pid`` is ``ancestor`` or one of its descendants in ``table``."""
    while pid > 1 and pid in table:
        if pid == ancestor:
            return True
        pid = table[pid].parent
    return False


class SourceRunnerPeak(PeriodicSampler):
    """Peak RSS of the Python streaming source runner(s) (:data:`RUNNER_COMMAND`) of this process's
    Spark, sampled while a query runs: the runner exits with its query, and ``VmHWM`` can only be
    read while it lives. Only this process's descendants count: on a shared machine other
    people's Spark runs runners too."""

    def __init__(self, interval_s: float = 0.2) -> None:
        super().__init__(interval_s)
        self.peak = 0

    def _sample(self) -> None:
        table = processes()
        for pid, process in table.items():
            if RUNNER_COMMAND not in process.command or not descends_from(table, pid, os.getpid()):
                continue
            try:
                self.peak = max(self.peak, peak_rss_bytes(pid))
            except (OSError, RuntimeError):  # exited meanwhile
                continue


def cpu_seconds_by_process(jvm_pid: int) -> dict[int, tuple[str, float]]:
    """CPU seconds used so far, per process id with its kind: this process (``PySpark driver``),
    the driver's JVM, its Python source runner, the executors' Python workers (all this process's
    descendants) and a broker the parent started (``/proc/<pid>/stat``: utime + stime). Other
    people's processes on a shared machine are not counted; their load shows in the load average.
    Per process: a difference of two samples taken per process counts a process started between
    them from zero and leaves one that exited out, where a difference of sums by kind goes
    negative when a Python worker exits."""
    table = processes()
    used: dict[int, tuple[str, float]] = {}
    for pid, process in table.items():
        command = process.command
        if not descends_from(table, pid, os.getpid()) and not (b"kafka.Kafka" in command
                                                                and descends_from(table, pid, os.getppid())):
            continue
        if pid == jvm_pid:
            name = "driver JVM"
        elif RUNNER_COMMAND in command:
            name = "Python source runner"
        elif b"pyspark.daemon" in command or b"pyspark.worker" in command:
            name = "Python workers"
        elif b"kafka.Kafka" in command:
            name = "broker"
        elif pid == os.getpid():
            name = "PySpark driver"
        else:
            continue
        used[pid] = (name, process.cpu_seconds)
    return used


def cpu_seconds_between(before: dict[int, tuple[str, float]], after: dict[int, tuple[str, float]]
                        ) -> dict[str, float]:
    """CPU seconds by kind of process between two :func:`cpu_seconds_by_process` samples."""
    used: dict[str, float] = {}
    for pid, (name, seconds) in after.items():
        used[name] = used.get(name, 0.0) + seconds - before.get(pid, (name, 0.0))[1]
    return used


def machine_busy_seconds(*, stolen: bool = False) -> float:
    """Seconds every core of this machine has been busy since boot (``/proc/stat``'s first line:
    user, nice, system and interrupts, not idle or I/O wait), other people's processes included;
    ``stolen``: with the time a hypervisor stole too."""
    with open("/proc/stat") as stat:
        fields = [int(field) for field in stat.readline().split()[1:9]]
    user, nice, system, _idle, _iowait, irq, softirq, steal = fields
    return (user + nice + system + irq + softirq + (steal if stolen else 0)) / os.sysconf("SC_CLK_TCK")


class CpuByProcess(PeriodicSampler):
    """CPU seconds each kind of process used while a read ran (:func:`cpu_seconds_by_process`),
    and the whole machine's busy seconds. The processes are sampled every ``interval_s``, keeping
    each one's last figure: Spark's source runner exits with its query, before a sample taken
    after the read could see it (what it used in its last ``interval_s`` is lost). The sampling
    thread's own CPU, spent in the PySpark driver, is taken out of that process's figure."""

    def __init__(self, jvm_pid: int, interval_s: float = 0.25) -> None:
        super().__init__(interval_s)
        self._jvm_pid = jvm_pid
        self._first: dict[int, tuple[str, float]] = {}
        self._last: dict[int, tuple[str, float]] = {}
        self._machine_busy = 0.0

    def _begin(self) -> None:
        self._first = cpu_seconds_by_process(self._jvm_pid)
        self._last = dict(self._first)
        self._machine_busy = -machine_busy_seconds()

    def __exit__(self, *exc: object) -> None:
        super().__exit__(*exc)
        self._machine_busy += machine_busy_seconds()

    def _sample(self) -> None:
        self._last.update(cpu_seconds_by_process(self._jvm_pid))

    def seconds(self) -> dict[str, float]:
        """CPU seconds by kind of process over the read, ``Spark`` (every Spark process: what
        the read costs the cluster's cores), ``Spark and broker``, and ``machine``."""
        used = cpu_seconds_between(self._first, self._last)
        if "PySpark driver" in used:
            used["PySpark driver"] -= self.sampler_cpu_s
        used["Spark"] = sum(seconds for name, seconds in used.items() if name != "broker")
        used["Spark and broker"] = used["Spark"] + used.get("broker", 0.0)
        used["machine"] = self._machine_busy
        return used

    def per_million(self, records: int) -> dict[str, float]:
        return {name: seconds * 1e6 / records for name, seconds in self.seconds().items()}
