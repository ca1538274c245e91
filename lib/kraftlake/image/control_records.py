"""Replaying the KRaft control records into the quorum part of the image.

A LeaderChangeMessage is the first record a newly elected leader writes in its epoch (KIP-595), so
the epoch comes from the event's ``leader_epoch``, the epoch of the batch that carries it.
VotersRecord and KRaftVersionRecord are KIP-853's dynamic quorum records; the KIP-595 draft's
VoterAssignmentMessage (ADR 0012) sets the voters the same way, without directories or endpoints.
"""

from __future__ import annotations

import dataclasses

from kraftlake.image.cluster_image import ClusterImage, Endpoint, ReplayResult, Voter, VoterRegistration, normalize_uuid
from kraftlake.metadata.uuids import ZERO_UUID


def _voters(rows: list[dict]) -> tuple[Voter, ...]:
    # VoterDirectoryId is v1+: a version 0 message holds its default, the zero Uuid.
    return tuple(Voter(v["VoterId"], normalize_uuid(v["VoterDirectoryId"])) for v in rows)


def replay_leader_change(image: ClusterImage, event: dict) -> ReplayResult:
    data = event["data"]
    image.quorum = dataclasses.replace(
        image.quorum,
        leader_id=data["LeaderId"],
        leader_epoch=event["leader_epoch"],
        voters=_voters(data["Voters"]),
        granting_voters=_voters(data["GrantingVoters"]),
    )
    return ReplayResult()


def replay_voters(image: ClusterImage, event: dict) -> ReplayResult:
    voter_set = tuple(
        VoterRegistration(
            v["VoterId"],
            normalize_uuid(v["VoterDirectoryId"]),
            tuple(sorted(Endpoint(e["Name"], e["Host"], e["Port"], -1) for e in v["Endpoints"])),
            v["KRaftVersionFeature"]["MinSupportedVersion"],
            v["KRaftVersionFeature"]["MaxSupportedVersion"],
        )
        for v in event["data"]["Voters"]
    )
    image.quorum = dataclasses.replace(image.quorum, voter_set=voter_set)
    return ReplayResult()


def replay_voter_assignment(image: ClusterImage, event: dict) -> ReplayResult:
    voter_set = tuple(VoterRegistration(v["VoterId"], ZERO_UUID, (), 0, 0) for v in event["data"]["Voters"])
    image.quorum = dataclasses.replace(image.quorum, voter_set=voter_set)
    return ReplayResult()


def replay_kraft_version(image: ClusterImage, event: dict) -> ReplayResult:
    image.quorum = dataclasses.replace(image.quorum, kraft_version=event["data"]["KRaftVersion"])
    return ReplayResult()
