"""A controller in miniature for tests that decide broker requests one by one (the tests of
``test_cluster_control`` and Kafka's ``ClusterControlManagerTest`` / ``ReplicationControlManagerTest``
cases in ``tests/kafka``): events in offset order, sessions expired before every request, every
record replayed into the image and checked against KIP-841 after every step."""

from __future__ import annotations

from pathlib import Path

from kraftlake.codec.events import check_struct
from kraftlake.controller.cluster_control import ControllerState, expire_sessions
from kraftlake.controller.decisions import Context
from kraftlake.controller.dispatch import decide
from kraftlake.image.cluster_image import ClusterImage
from kraftlake.image.replay import replay
from kraftlake.metadata import uuids
from kraftlake.metadata.schemas import registry

FIXTURES = Path(__file__).resolve().parents[2] / "shared" / "fixtures" / "kafka-logs"
TS = 1_763_580_879_457
TIMEOUT = 9000  # broker.session.timeout.ms, Kafka's default
T1, T2 = (uuids.from_bytes(bytes([n] * 16)) for n in (1, 2))
CLUSTER = "fPZv1VBsRFmnlRvmGcOW9w"
MV = 19  # metadata.version 3.7-IV4, as in the real logs

# The request versions the tests send (the newest each RPC has).
VERSIONS = {"BrokerRegistrationRequest": 4, "BrokerHeartbeatRequest": 1, "UnregisterBrokerRequest": 0,
            "CreateTopicsRequest": 7, "DeleteTopicsRequest": 6, "CreatePartitionsRequest": 3,
            "AlterPartitionRequest": 3, "ElectLeadersRequest": 2, "AlterPartitionReassignmentsRequest": 0,
            "ListPartitionReassignmentsRequest": 0}


class KafkaMockRandom:
    """Kafka's test ``MockRandom`` (server-common, a ``java.util.Random`` whose ``next(bits)`` is a 64-bit
    linear congruential step from 17) with ``Random.nextInt`` and ``Collections.shuffle`` as Java has
    them, under the names the placer calls: Kafka's tests that assert an exact replica placement get the
    same random numbers here."""

    def __init__(self, state: int = 17) -> None:
        self.state = state

    def _next(self, bits: int) -> int:
        self.state = (self.state * 2862933555777941757 + 3037000493) & ((1 << 64) - 1)
        return self.state >> (64 - bits)

    def randrange(self, bound: int) -> int:
        """``nextInt(bound)``: a power of two takes the high bits; otherwise draws are retried while the
        int32 sum ``u - r + (bound - 1)`` overflows."""
        r = self._next(31)
        if bound & (bound - 1) == 0:
            return (bound * r) >> 31
        while True:
            value = r % bound
            if ((r - value + bound - 1) & 0xFFFFFFFF) < 1 << 31:
                return value
            r = self._next(31)

    def shuffle(self, items: list) -> None:
        for i in range(len(items), 1, -1):
            j = self.randrange(i)
            items[i - 1], items[j] = items[j], items[i - 1]


def ev(type_: str, version: int = 0, **fields) -> dict:
    """A record or request with every field of its version, validated like hand-written input."""
    return {"type": type_, "version": version, "data": check_struct(registry()[type_], fields, version, type_)}


def incarnation(n: int) -> str:
    return uuids.from_bytes(bytes([0xA0 + n] * 16))


def log_dir(broker_id: int) -> str:
    """The one log directory a test broker registers with."""
    return uuids.from_bytes(bytes([0x70 + broker_id] * 16))


def can_serve(image: ClusterImage, broker_id: int) -> bool:
    broker = image.brokers.get(broker_id)
    return broker is not None and not broker.fenced and not broker.in_controlled_shutdown


def check_kip841(before: dict, image: ClusterImage) -> None:
    """No fenced or shutting-down broker leads or has joined an ISR; leaders are in their ISR."""
    for p in image.iter_partitions():
        old = before.get((p.topic_id, p.partition_id))
        joined = set(p.isr) - (set() if old is None else set(old.isr))
        assert all(can_serve(image, r) for r in joined), f"ineligible replica joined the ISR: {p}"
        assert p.leader == -1 or can_serve(image, p.leader), f"ineligible leader: {p}"
        assert p.leader == -1 or p.leader in p.isr, f"leader outside the ISR: {p}"


class Controller:
    """The shell around the core, in miniature: events in offset order, sessions expired before every
    request, every record replayed into the image and checked against KIP-841."""

    def __init__(self, metadata_version: int | None = MV, cluster_id: str | None = None, **config: str):
        self.image = ClusterImage()
        self.state = ControllerState()
        self.offset = 0
        self.now = TS
        self.cluster_id = cluster_id
        self.config = {k.replace("_", "."): v for k, v in config.items()}
        self.records: list[dict] = []  # what the last step wrote
        self.whole_image = True  # false: decide as one shard of several (Context.whole_image)
        if metadata_version is not None:
            self.log(ev("FeatureLevelRecord", Name="metadata.version", FeatureLevel=metadata_version))

    def ctx(self) -> Context:
        return Context(now_ms=self.now, offset=self.offset, config=self.config, cluster_id=self.cluster_id,
                       whole_image=self.whole_image)

    def log(self, *records: dict) -> None:
        """Records another controller wrote (or the test's setup), one offset each."""
        for rec in records:
            self.offset += 1
            self._replay([rec])

    def _replay(self, records: list[dict]) -> None:
        before = {(p.topic_id, p.partition_id): p for p in self.image.iter_partitions()}
        for rec in records:
            result = replay(self.image, {**rec, "offset": self.offset, "leader_epoch": 1, "timestamp": self.now})
            assert result.rejected is None, (rec, result.rejected)
        check_kip841(before, self.image)

    def at(self, now: int) -> Controller:
        assert now >= self.now, "event time only moves forward"
        self.now = now
        return self

    def expire(self) -> list[dict]:
        """A broadcast event with no decision of its own: only the session clock moves."""
        self.offset += 1
        self.records = expire_sessions(self.image, self.state, self.ctx())
        self._replay(self.records)
        return self.records

    def request(self, type_: str, *, version: int | None = None, **fields) -> dict:
        """Decide a request (at ``version``, by default the newest) and replay what it writes."""
        version = VERSIONS[type_] if version is None else version
        self.offset += 1
        expired = expire_sessions(self.image, self.state, self.ctx())
        self._replay(expired)
        decision = decide(self.image, self.state, ev(type_, version, **fields), self.ctx())
        assert decision.response["type"] == type_.replace("Request", "Response")
        assert decision.response["version"] == version
        self._replay(decision.records)
        self.records = expired + decision.records
        return decision.response["data"]

    # --- the requests a broker sends ---

    def register(self, broker_id: int, inc: int = 1, *, cluster: str = CLUSTER, port: int = 9092,
                 features: list[tuple[str, int, int]] | None = None, log_dirs: list[str] | None = None,
                 **fields) -> dict:
        if features is None:
            features = [("metadata.version", 1, MV)]
        return self.request("BrokerRegistrationRequest", BrokerId=broker_id, ClusterId=cluster,
                            IncarnationId=incarnation(inc),
                            Listeners=[{"Name": "PLAINTEXT", "Host": f"b{broker_id}", "Port": port,
                                        "SecurityProtocol": 0}],
                            Features=[{"Name": n, "MinSupportedVersion": lo, "MaxSupportedVersion": hi}
                                      for n, lo, hi in features],
                            Rack=None, LogDirs=[log_dir(broker_id)] if log_dirs is None else log_dirs, **fields)

    def heartbeat(self, broker_id: int, *, epoch: int | None = None, offset: int | None = None,
                  fence: bool = False, shutdown: bool = False) -> dict:
        broker = self.image.brokers.get(broker_id)
        return self.request("BrokerHeartbeatRequest", BrokerId=broker_id,
                            BrokerEpoch=broker.epoch if epoch is None else epoch,
                            CurrentMetadataOffset=self.offset if offset is None else offset,
                            WantFence=fence, WantShutDown=shutdown)

    def start(self, *broker_ids: int) -> None:
        """Register and unfence brokers, each caught up at once."""
        for broker_id in broker_ids:
            assert self.register(broker_id)["ErrorCode"] == 0
            assert self.heartbeat(broker_id)["IsFenced"] is False

    def topic(self, topic_id: str, name: str, assignments: list[list[int]],
              isr: list[list[int]] | None = None, leaders: list[int] | None = None) -> None:
        records = [ev("TopicRecord", Name=name, TopicId=topic_id)]
        for pid, replicas in enumerate(assignments):
            part_isr = replicas if isr is None else isr[pid]
            records.append(ev("PartitionRecord", 1, TopicId=topic_id, PartitionId=pid, Replicas=replicas,
                              Isr=part_isr, Leader=part_isr[0] if leaders is None else leaders[pid],
                              LeaderEpoch=5, PartitionEpoch=10))
        self.log(*records)

    # --- what the image says ---

    def broker(self, broker_id: int):
        return self.image.brokers[broker_id]

    def partition(self, topic_id: str, pid: int = 0) -> tuple:
        p = self.image.partition(topic_id, pid)
        return p.leader, list(p.isr), p.leader_epoch, p.partition_epoch

    def leads(self, broker_id: int) -> list:
        return [(p.topic_id, p.partition_id) for p in self.image.iter_partitions() if p.leader == broker_id]


def types(records: list[dict]) -> list[str]:
    return [r["type"] for r in records]


def change(broker_id: int, epoch: int, version: int, fenced: int = 0, shutdown: int = 0) -> dict:
    return ev("BrokerRegistrationChangeRecord", version, BrokerId=broker_id, BrokerEpoch=epoch, Fenced=fenced,
              **({"InControlledShutdown": shutdown} if version >= 1 else {}))
