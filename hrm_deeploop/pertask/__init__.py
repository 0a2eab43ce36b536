"""Per-task test-time training (`hrm-deeploop ttt`): one copy of a pretrained model per ARC task,
trained on that task's demonstrations alone, then voted into a submission (docs/per-task.md)."""
