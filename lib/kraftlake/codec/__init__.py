"""The real Kafka binary format: record batches, metadata records, snapshots, partition directories."""

from kraftlake.codec.logdir import (FROM_SNAPSHOT, FULL_HISTORY, HISTORY, STARTS, CorruptLogError, DirectoryPlan,
    decode_buffer, decode_file, decode_partition_dir, decode_plan, decode_snapshot, list_partition_dir,
    plan_partition_dir, read_partition_dir, read_leader_epoch_checkpoint, read_meta_properties, read_quorum_state,
    snapshot_end_offset)
from kraftlake.codec.messages import MessageError, decode_message, encode_message
from kraftlake.metadata.rejections import Item, Rejection

__all__ = [
    "FROM_SNAPSHOT", "FULL_HISTORY", "HISTORY", "STARTS", "DirectoryPlan", "decode_plan", "plan_partition_dir",
    "CorruptLogError", "Item", "Rejection", "MessageError", "decode_buffer", "decode_file",
    "decode_message", "decode_partition_dir", "decode_snapshot", "encode_message", "list_partition_dir",
    "read_leader_epoch_checkpoint", "read_meta_properties", "read_partition_dir", "read_quorum_state",
    "snapshot_end_offset",
]
