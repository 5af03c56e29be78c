"""Drift checks for the documentation.

- docs/api.md is exactly what tools/gen_api_doc.py makes of the .proto files;
- every service, rpc, message, field and enum value of the .proto files, found
  by a plain line scan written independently of the generator, has its
  heading or table row in docs/api.md, with its comment;
- every relative link in docs/*.md and README.md points to an existing file,
  and every #anchor to a heading of its page.
Each check also has a test that feeds it a broken input and sees it fail.
"""

import glob
import os
import re

import pytest

import gen_api_doc

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
API_DOC = os.path.join(REPO, "docs", "api.md")


def read(path):
    with open(path, encoding="utf-8") as f:
        return f.read()


# ---------------------------------------------------------------------------
# (a) docs/api.md is up to date
# ---------------------------------------------------------------------------

def test_api_doc_matches_the_generator_output():
    expected = gen_api_doc.generate(REPO)
    assert read(API_DOC) == expected, (
        "docs/api.md differs from the .proto comments: run /usr/bin/python3 tools/gen_api_doc.py")


def test_generator_refuses_a_statement_it_does_not_know():
    text = 'syntax = "proto3";\npackage p;\nmessage M {\n  extensions 100 to 199;\n}\n'
    with pytest.raises(ValueError, match=r"x\.proto:4: .*extensions 100 to 199"):
        gen_api_doc.parse_proto("x.proto", text)


# ---------------------------------------------------------------------------
# (b) every element of the .proto files is in docs/api.md
# ---------------------------------------------------------------------------

def scan_proto(text):
    """Every element of a .proto, by a plain line scan (not the generator's parser).

    Returns (kind, owner, name, comment) tuples: kind is service, message or
    enum (owner None; nested names dotted), rpc (owner: its service), field
    (owner: its message) or value (owner: its enum); comment is the text of
    the // lines right above, joined with spaces.
    """
    found, stack, comment = [], [], []
    for raw in text.splitlines():
        line = raw.strip()
        if line.startswith("//"):
            comment.append(line[2:].strip())
            continue
        if not line:
            comment = []
            continue
        code, _, trailing = line.partition("//")
        code = code.strip()
        text_of_comment = " ".join(comment + ([trailing.strip()] if trailing else []))
        comment = []
        opened = re.match(r"(service|message|enum|oneof)\s+(\w+)\s*\{", code)
        if opened:
            kind, name = opened.groups()
            if kind == "oneof":
                stack.append(("oneof", stack[-1][1]))
                continue
            outer = [n for k, n in stack if k == "message"]
            full = ".".join(outer[-1:] + [name])
            found.append((kind, None, full, text_of_comment))
            stack.append((kind, full))
        elif code == "}":
            stack.pop()
        elif code.startswith("rpc "):
            found.append(("rpc", stack[-1][1], code.split()[1].split("(")[0], text_of_comment))
        elif stack and re.search(r"\b(\w+)\s*=\s*-?\d+", code):
            name = re.search(r"\b(\w+)\s*=\s*-?\d+", code).group(1)
            kind, owner = stack[-1]
            found.append(("value" if kind == "enum" else "field", owner, name, text_of_comment))
    return found


def normalize(text):
    return " ".join(text.replace("\\|", "|").split())


def missing_from_api_doc(doc, elements):
    """What of `elements` (scan_proto's tuples) docs/api.md text `doc` lacks."""
    sections = {}
    for part in re.split(r"^#### ", doc, flags=re.M)[1:]:
        title, _, body = part.partition("\n")
        sections[title.strip()] = body
    problems = []
    for kind, owner, name, comment in elements:
        if owner is None:
            body = sections.get(f"`{name}` ({kind})")
            if body is None:
                problems.append(f"{kind} {name}: no heading `{name}` ({kind})")
            elif comment and normalize(comment) not in normalize(body):
                problems.append(f"{kind} {name}: its comment is not in its section")
            continue
        owner_kind = {"rpc": "service", "field": "message", "value": "enum"}[kind]
        body = sections.get(f"`{owner}` ({owner_kind})", "")
        rows = [row for row in body.splitlines() if re.match(rf"\| `{re.escape(name)}`(\||<br>| )", row)]
        if not rows:
            problems.append(f"{kind} {owner}.{name}: no row in the section of {owner}")
        elif comment and not any(normalize(comment) in normalize(row) for row in rows):
            problems.append(f"{kind} {owner}.{name}: its comment is not in its row")
    return problems


def proto_elements():
    elements = []
    for path in gen_api_doc.PROTOS:
        elements += scan_proto(read(os.path.join(REPO, path)))
    return elements


def test_the_plain_scan_sees_the_whole_api():
    kinds = {}
    for kind, owner, name, _ in proto_elements():
        kinds.setdefault(kind, set()).add(f"{owner}.{name}" if owner else name)
    # Spot checks that the scan itself works, one per kind.
    assert "Ingest" in kinds["service"] and "Query" in kinds["service"]
    assert "Query.WatchWindows" in kinds["rpc"]
    assert "HealthCheckResponse.ServingStatus" in kinds["enum"]
    assert "EventValue.bool_value" in kinds["field"]
    assert "IngestHello.client_instance" in kinds["field"]
    assert "Aggregation.MIN" in kinds["value"]
    assert len(kinds["field"]) >= 60


def test_every_rpc_message_field_and_enum_value_is_in_api_doc():
    problems = missing_from_api_doc(read(API_DOC), proto_elements())
    assert not problems, ("docs/api.md lacks parts of the .proto files (run "
                          "/usr/bin/python3 tools/gen_api_doc.py):\n" + "\n".join(problems))


def test_every_element_of_the_protos_has_a_comment():
    # The .proto comments are the API's only reference: an element without
    # one would have an empty description in docs/api.md.
    bare = [f"{kind} {owner + '.' if owner else ''}{name}"
            for kind, owner, name, comment in proto_elements() if not comment]
    assert not bare, "add a comment in the .proto above: " + ", ".join(bare)


def test_the_element_check_finds_a_missing_field_and_a_missing_message():
    doc = read(API_DOC)
    without_field = "\n".join(line for line in doc.splitlines()
                              if not line.startswith("| `client_instance` |"))
    assert missing_from_api_doc(without_field, proto_elements()) == [
        "field IngestHello.client_instance: no row in the section of IngestHello"]
    without_message = doc.replace("#### `DropReport` (message)", "#### `DropReports` (message)")
    problems = missing_from_api_doc(without_message, proto_elements())
    assert "message DropReport: no heading `DropReport` (message)" in problems
    assert "field DropReport.dropped: no row in the section of DropReport" in problems


def test_the_element_check_finds_a_stale_comment():
    doc = read(API_DOC).replace("Highest batch sequence processed so far on this stream.",
                                "Highest batch sequence processed.")
    assert missing_from_api_doc(doc, proto_elements()) == [
        "field IngestAck.sequence: its comment is not in its row"]


# ---------------------------------------------------------------------------
# (c) relative links point to existing files
# ---------------------------------------------------------------------------

_LINK = re.compile(r"!?\[(?:[^\[\]]|\[[^\]]*\])*\]\(\s*<?([^)\s>]+)>?(?:\s+\"[^\"]*\")?\s*\)")
_REFERENCE = re.compile(r"^ {0,3}\[[^\]]+\]:\s*<?(\S+?)>?(?:\s.*)?$", re.M)


def relative_links(markdown):
    """Targets of the relative links in `markdown`, code blocks and spans left out."""
    text = re.sub(r"^ {0,3}(```|~~~).*?^ {0,3}\1[^\n]*$", "", markdown, flags=re.M | re.S)
    text = re.sub(r"(`+)(?:(?!\1).)+?\1", "", text, flags=re.S)
    targets = _LINK.findall(text) + _REFERENCE.findall(text)
    return [t for t in targets if not re.match(r"^([a-zA-Z][a-zA-Z0-9+.-]*:|//|#)", t)]


def broken_links(paths, repo):
    problems = []
    for path in paths:
        for target in relative_links(read(path)):
            file_part = target.split("#", 1)[0].split("?", 1)[0]
            base = repo if file_part.startswith("/") else os.path.dirname(path)
            if not os.path.exists(os.path.normpath(os.path.join(base, file_part.lstrip("/")))):
                problems.append(f"{os.path.relpath(path, repo)}: {target}")
    return problems


def test_every_relative_link_in_the_docs_points_to_an_existing_file():
    paths = sorted(glob.glob(os.path.join(REPO, "docs", "*.md"))) + [os.path.join(REPO, "README.md")]
    assert len(paths) > 5
    problems = broken_links(paths, REPO)
    assert not problems, "links to files that do not exist:\n" + "\n".join(problems)


def test_the_link_check_finds_a_broken_link_and_ignores_code(tmp_path):
    (tmp_path / "docs").mkdir()
    (tmp_path / "deploy").mkdir()
    (tmp_path / "docs" / "there.md").write_text("# There\n")
    page = tmp_path / "docs" / "page.md"
    page.write_text(
        "[ok](there.md#there) [dir](../deploy/) [web](https://example.com/x.md) [a](#top)\n"
        "[gone](missing.md) ![img](../pictures/flow.png)\n"
        "[ref]: ../deploy/nothing.yml\n"
        "`[not a link](inline.md)`\n"
        "```\n[not a link](fenced.md)\n```\n")
    assert broken_links([str(page)], str(tmp_path)) == [
        "docs/page.md: missing.md", "docs/page.md: ../pictures/flow.png",
        "docs/page.md: ../deploy/nothing.yml"]


# ---------------------------------------------------------------------------
# Anchors: #fragments name a heading of their page, as GitHub makes them
# ---------------------------------------------------------------------------

def heading_anchors(markdown):
    """GitHub's anchors for the headings of `markdown`, plus <a id/name> ones."""
    text = re.sub(r"^ {0,3}(```|~~~).*?^ {0,3}\1[^\n]*$", "", markdown, flags=re.M | re.S)
    anchors, seen = set(), {}
    for match in re.finditer(r"^ {0,3}#{1,6}\s+(.*?)\s*#*\s*$", text, flags=re.M):
        title = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", match.group(1))
        slug = re.sub(r"[^\w\- ]", "", title.strip().lower()).replace(" ", "-")
        count = seen.get(slug, 0)
        seen[slug] = count + 1
        anchors.add(slug if count == 0 else f"{slug}-{count}")
    anchors.update(re.findall(r"<a\s+(?:id|name)=\"([^\"]+)\"", markdown))
    return anchors


def broken_anchors(paths, repo):
    problems = []
    for path in paths:
        markdown = read(path)
        text = re.sub(r"^ {0,3}(```|~~~).*?^ {0,3}\1[^\n]*$", "", markdown, flags=re.M | re.S)
        text = re.sub(r"(`+)(?:(?!\1).)+?\1", "", text, flags=re.S)
        targets = relative_links(markdown) + re.findall(r"\]\((#[^)\s]+)\)", text)
        for target in targets:
            file_part, hash_sign, anchor = target.partition("#")
            if not hash_sign:
                continue
            page = os.path.normpath(os.path.join(os.path.dirname(path), file_part)) if file_part else path
            if not page.endswith(".md") or not os.path.exists(page):
                continue  # other files: the link test above
            if anchor not in heading_anchors(read(page)):
                problems.append(f"{os.path.relpath(path, repo)}: {target}")
    return problems


def test_every_anchor_in_the_docs_names_a_heading():
    paths = sorted(glob.glob(os.path.join(REPO, "docs", "*.md"))) + [os.path.join(REPO, "README.md")]
    problems = broken_anchors(paths, REPO)
    assert not problems, "links to headings that do not exist:\n" + "\n".join(problems)


def test_the_anchor_check_finds_a_missing_heading(tmp_path):
    (tmp_path / "there.md").write_text("# There\n## Limits of the daemon\n## Limits of the daemon\n")
    page = tmp_path / "page.md"
    page.write_text(
        "## `Foo.Bar` (message)\n"
        "[a](#foobar-message) [b](there.md#limits-of-the-daemon) [c](there.md#limits-of-the-daemon-1)\n"
        "[d](#nope) [e](there.md#limits) `[f](#in-code)`\n")
    assert broken_anchors([str(page)], str(tmp_path)) == ["page.md: there.md#limits", "page.md: #nope"]
