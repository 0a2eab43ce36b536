"""Text for the looped GPT: token shards and their loaders, prepare-text, tokenizers, lm-eval."""
