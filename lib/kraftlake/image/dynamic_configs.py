"""Replaying dynamic configuration: ConfigRecord and ClientQuotaRecord.

Rules from Kafka's ``ConfigurationsDelta``/``ConfigurationDelta`` (a null value deletes the key, a
resource without keys disappears) and ``ClientQuotasDelta``/``ClientQuotaImage`` (an entity is the
set of its (type, name) parts; ``Remove`` deletes the key).
"""

from __future__ import annotations

from kraftlake.image.cluster_image import ClusterImage, ReplayResult, quota_part_key


def replay_config(image: ClusterImage, event: dict) -> ReplayResult:
    data = event["data"]
    key = (data["ResourceType"], data["ResourceName"])
    name, value = data["Name"], data["Value"]
    if value is None:
        values = image.configs.get(key)
        if values is not None:
            values.pop(name, None)
            if not values:
                del image.configs[key]
    else:
        image.configs.setdefault(key, {})[name] = value
    return ReplayResult()


def replay_client_quota(image: ClusterImage, event: dict) -> ReplayResult:
    data = event["data"]
    entity = tuple(sorted(((e["EntityType"], e["EntityName"]) for e in data["Entity"]), key=quota_part_key))
    key = data["Key"]
    if data["Remove"]:
        values = image.client_quotas.get(entity)
        if values is not None:
            values.pop(key, None)
            if not values:
                del image.client_quotas[entity]
    else:
        image.client_quotas.setdefault(entity, {})[key] = data["Value"]
    return ReplayResult()
