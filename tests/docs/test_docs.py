"""The documentation stays true to the code (docs/api.md, links)."""

import glob
import importlib.util
import os
import re

import pytest

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
PROTO = os.path.join(ROOT, "proto", "torchmon", "v1", "torchmon.proto")
API = os.path.join(ROOT, "docs", "api.md")


def load_generator():
    spec = importlib.util.spec_from_file_location(
        "gen_api_doc", os.path.join(ROOT, "tools", "gen_api_doc.py"))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_api_reference_is_what_the_generator_makes_of_the_proto():
    generated = load_generator().render(open(PROTO, encoding="utf-8").read())
    current = open(API, encoding="utf-8").read()
    assert current == generated, (
        "docs/api.md is stale: run /usr/bin/python3 tools/gen_api_doc.py")


def proto_elements():
    """Every service, rpc, message, enum, field and enum value of the .proto,
    found by a plain scan of its text (not by the generator under test)."""
    text = re.sub(r"//[^\n]*", "", open(PROTO, encoding="utf-8").read())
    names = set()
    names.update(re.findall(r"\b(?:service|message|enum)\s+(\w+)\s*\{", text))
    names.update(re.findall(r"\brpc\s+(\w+)\s*\(", text))
    # fields and enum values: "... name = N;"
    names.update(re.findall(r"(\w+)\s*=\s*\d+\s*;", text))
    return names


def test_every_element_of_the_proto_is_documented_in_the_reference():
    doc = open(API, encoding="utf-8").read()
    elements = proto_elements()
    assert {"Ingest", "Query", "Stream", "WatchWindows", "daemon_instance", "GLOB"} <= elements
    missing = sorted(e for e in elements if f"`{e}`" not in doc)
    assert not missing, f"in the .proto but not in docs/api.md: {missing}"


def test_every_documented_row_has_a_description():
    rows = [line for line in open(API, encoding="utf-8") if line.startswith("| `")]
    assert rows
    empty = [row for row in rows if row.rstrip().endswith("|  |")]
    assert not empty, "add a comment in the .proto for: " + "".join(empty)


def markdown_files():
    return [os.path.join(ROOT, "README.md")] + sorted(glob.glob(os.path.join(ROOT, "docs", "*.md")))


@pytest.mark.parametrize("path", markdown_files(), ids=lambda p: os.path.relpath(p, ROOT))
def test_relative_links_resolve(path):
    text = open(path, encoding="utf-8").read()
    text = re.sub(r"```.*?```", "", text, flags=re.S)  # code blocks hold no links
    broken = []
    for target in re.findall(r"\]\(([^)\s]+)\)", text):
        if re.match(r"[a-z]+:", target) or target.startswith("#"):
            continue  # URLs, anchors within the page
        file = target.split("#", 1)[0]
        if not os.path.exists(os.path.normpath(os.path.join(os.path.dirname(path), file))):
            broken.append(target)
    assert not broken, f"{os.path.relpath(path, ROOT)} links to missing files: {broken}"
