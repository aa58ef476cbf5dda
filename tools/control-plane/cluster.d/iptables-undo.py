#!/usr/bin/env python3
"""Undoes what was added to iptables since a snapshot (`iptables-save` output), rule by rule and
chain by chain: rules present now but not then are deleted, chains created since are flushed
and removed. Nothing present in the snapshot is touched, so rules others added meanwhile under
other names stay. Usage: iptables-undo.py iptables|ip6tables SNAPSHOT"""
import shlex
import subprocess
import sys


def parse(text):
    tables, table = {}, None
    for line in text.splitlines():
        if line.startswith("*"):
            table = tables.setdefault(line[1:], {"chains": set(), "rules": []})
        elif line.startswith(":") and table is not None:
            table["chains"].add(line[1:].split()[0])
        elif line.startswith("-A ") and table is not None:
            table["rules"].append(line[3:])
    return tables


def main():
    tool, snapshot = sys.argv[1], sys.argv[2]
    before = parse(open(snapshot).read())
    now = parse(subprocess.run([f"{tool}-save"], capture_output=True, text=True, check=True).stdout)
    for name, table in now.items():
        old = before.get(name, {"chains": set(), "rules": []})
        for rule in reversed(table["rules"]):
            if rule not in old["rules"]:
                subprocess.run([tool, "-t", name, "-D", *shlex.split(rule)], check=False)
        for chain in sorted(table["chains"] - old["chains"]):
            subprocess.run([tool, "-t", name, "-F", chain], check=False)
        for chain in sorted(table["chains"] - old["chains"]):
            subprocess.run([tool, "-t", name, "-X", chain], check=False)


main()
