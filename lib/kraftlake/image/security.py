"""Replaying ACLs, SCRAM credentials and delegation tokens.

Rules from Kafka's ``AclsDelta`` and ``AclControlManager`` (removing an unknown ACL id is an error),
``ScramControlManager`` (so is removing an unknown credential) and ``DelegationTokenDelta`` (removing
an unknown token is not).
"""

from __future__ import annotations

from kraftlake.image.cluster_image import (Acl, ClusterImage, DelegationToken, ReplayResult, ScramCredential,
    normalize_uuid)


def replay_acl(image: ClusterImage, event: dict) -> ReplayResult:
    data = event["data"]
    image.acls[normalize_uuid(data["Id"])] = Acl(
        data["ResourceType"], data["ResourceName"], data["PatternType"], data["Principal"],
        data["Host"], data["Operation"], data["PermissionType"])
    return ReplayResult()


def replay_remove_acl(image: ClusterImage, event: dict) -> ReplayResult:
    acl_id = normalize_uuid(event["data"]["Id"])
    if image.acls.pop(acl_id, None) is None:
        return ReplayResult(rejected=f"no ACL with id {acl_id} to remove")
    return ReplayResult()


def replay_scram_credential(image: ClusterImage, event: dict) -> ReplayResult:
    data = event["data"]
    image.scram_credentials[(data["Name"], data["Mechanism"])] = ScramCredential(
        bytes(data["Salt"]), bytes(data["StoredKey"]), bytes(data["ServerKey"]), data["Iterations"])
    return ReplayResult()


def replay_remove_scram_credential(image: ClusterImage, event: dict) -> ReplayResult:
    data = event["data"]
    key = (data["Name"], data["Mechanism"])
    if image.scram_credentials.pop(key, None) is None:
        return ReplayResult(rejected=f"no SCRAM credential for {key[0]!r} with mechanism {key[1]} to remove")
    return ReplayResult()


def replay_delegation_token(image: ClusterImage, event: dict) -> ReplayResult:
    data = event["data"]
    image.delegation_tokens[data["TokenId"]] = DelegationToken(
        data["Owner"], data["Requester"], tuple(data["Renewers"]), data["IssueTimestamp"],
        data["MaxTimestamp"], data["ExpirationTimestamp"])
    return ReplayResult()


def replay_remove_delegation_token(image: ClusterImage, event: dict) -> ReplayResult:
    image.delegation_tokens.pop(event["data"]["TokenId"], None)
    return ReplayResult()
