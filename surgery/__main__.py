from surgery.cli import entry

entry()
