"""The `minibroker` command (`cli`) and its subcommands: local cluster, topics, configs, reassign."""
