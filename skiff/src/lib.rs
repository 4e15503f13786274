//! The `skiff` command line. Its subcommands arrive with the parts they start (see DESIGN.md).
