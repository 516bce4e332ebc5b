"""Which code matters at the cursor: candidate definitions and windows, each with a score.

Signals, strongest first: names used near the cursor resolved through the file's imports (across
files, following re-exports); same-file definitions; names imported but not yet used; recent edits
and open buffers; definitions found only through the global symbol table; Jaccard-similar windows.
"""

from __future__ import annotations

import functools
import posixpath
import re
from collections import Counter, defaultdict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from memosight_lsp.workspace import Definition, FileSymbols, Import, LanguageSpec, WorkspaceIndex

from .lexical import best_windows, identifiers
from .render import split_lines

NEAR_LINES_ABOVE = 60
NEAR_LINES_BELOW = 20
QUERY_LINES = 15
MAX_GLOBAL_FILES = 4  # a name defined in more files than this says too little to follow
MAX_WINDOW_FILES = 8
MAX_CANDIDATES = 64
MAX_GLOBAL_WORDS = 48
FILE_LINES = 400  # how far the faint whole-file signal reaches (bounds the cost in huge files)
SECOND_HOP_TOP = 6
FOLDER_PACKAGES = {"go", "java"}  # languages whose package is every file of a folder
MAX_PACKAGE_FILES = 64

# How much each way of finding a definition is trusted.
W_IMPORTED = 1.0
W_STAR = 0.9
W_SAME_FILE = 0.8
W_GLOBAL = 0.6
W_GLOBAL_PYTHON = 0.15
W_ATTRIBUTE = 0.25  # `x.name` with x of unknown type: any member called `name`
W_IMPORT_BASELINE = 0.2  # imported names not used near the cursor: likely to be used next
W_TOPIC = 0.6  # ... more so when their name shares words with the code at the cursor
W_UNUSED_IMPORT = 0.8  # ... most of all imported names the file uses nowhere yet
UNUSED_IMPORTS_CLEAR = 8  # more unused imports than this (re-export modules) weigh less each
TOPIC_LINES = 12
W_MODULE_TOPIC = 0.3
W_RECENT = 0.5
W_WINDOW = 0.6
OPEN_BUFFER_BOOST = 1.2

_WORD = re.compile(r"(\.|->)?\s*\b([A-Za-z_][A-Za-z0-9_]*)")
_ASSIGNED = re.compile(
    r"(?:^\s*|\bfor\s+|\bas\s+|,\s*|\b(?:let|const|var|auto)\s+)([A-Za-z_][A-Za-z0-9_]*)\s*(?:=(?!=)|,|\bin\b|:=|\))",
    re.M,
)
_PAIR = re.compile(r"([A-Za-z_][A-Za-z0-9_]*)\s*(?:\.|::|->)\s*([A-Za-z_][A-Za-z0-9_]*)")


@dataclass(slots=True)
class Candidate:
    path: str
    definition: Definition | None  # None: a window of lines
    def_index: int
    start_line: int
    end_line: int
    score: float
    symbols: FileSymbols | None  # the outline the definition came from (for stubs)
    text: str | None = None  # window text


class Ranker:
    def __init__(
        self,
        *,
        index: WorkspaceIndex,
        rel: str,
        spec: LanguageSpec,
        symbols: FileSymbols,
        lines: list[str],
        line: int,
        column: int,
        open_buffers: Mapping[str, str],
        recent_edits: Sequence[tuple[str, int]],
    ) -> None:
        self.index = index
        self.rel = rel
        self.spec = spec
        self.symbols = symbols
        self.lines = lines
        self.line = line
        self.column = column
        self.open = {index.relpath(p): t for p, t in open_buffers.items()}
        self.recent_edits = recent_edits
        self.scores: dict[tuple[str, int], float] = defaultdict(float)
        self.outlines: dict[str, FileSymbols | None] = {rel: symbols}
        self.windows: list[Candidate] = []

    # -- file access ---------------------------------------------------------------------------
    def outline(self, rel: str) -> FileSymbols | None:
        if rel not in self.outlines:
            text = self.open.get(rel)
            if text is not None:
                self.outlines[rel] = self.index.symbols_for_text(rel, text)
            else:
                self.outlines[rel] = self.index.symbols(rel)
        return self.outlines[rel]

    def named(self, rel: str, name: str) -> Sequence[int]:
        """Indices of a file's definitions called `name`."""
        outline = self.outline(rel)
        return outline.indices_named(name) if outline is not None else ()

    def file_text(self, rel: str) -> str | None:
        text = self.open.get(rel)
        return text if text is not None else self.index.text(rel)

    # -- signals -------------------------------------------------------------------------------
    def innermost(self) -> Definition | None:
        """The innermost definition around the cursor that is no container (class, module)."""
        inside = [
            d for d in self.symbols.enclosing(self.line) if d.kind not in self.spec.containers
        ]
        return inside[-1] if inside else None

    def usage_weights(
        self, inner: Definition | None
    ) -> tuple[dict[str, float], dict[str, float], dict[tuple[str, str], float]]:
        """How strongly each identifier is tied to the cursor: bare names, attribute names
        (`x.name`) and `base.attr` pairs, weighted by distance from the cursor; the whole body
        of `inner` (the innermost function around the cursor, if any) counts too."""
        bare: dict[str, float] = defaultdict(float)
        attrs: dict[str, float] = defaultdict(float)
        pairs: dict[tuple[str, str], float] = defaultdict(float)
        lines, line, keywords = self.lines, self.line, self.spec.keywords

        def take(text: str, weight: float) -> None:
            # Counter tallies in C: the Python loop runs once per distinct word, not per use.
            for (dot, word), uses in Counter(_WORD.findall(text)).items():
                if word in keywords:
                    continue
                if dot:
                    attrs[word] += weight * uses
                else:
                    bare[word] += weight * uses
            if "." in text or "::" in text:
                for base, attr in _pairs(text):
                    pairs[(base, attr)] += weight

        # The rest of the file, faintly: what the file uses is what it will use again.
        take("\n".join(lines[max(0, line - FILE_LINES) : line + FILE_LINES]), 0.03)
        if inner is not None:
            take("\n".join(lines[inner.start_line : inner.end_line + 1]), 0.25)
        low = max(0, line - NEAR_LINES_ABOVE)
        high = min(len(lines) - 1, line + NEAR_LINES_BELOW)
        for i in range(low, high + 1):
            if i == line:
                take(lines[i][: self.column], 2.0)
                take(lines[i][self.column :], 0.5)
                continue
            distance = abs(line - i)
            weight = (1.0 if i < line else 0.5) / (1.0 + distance / 6.0)
            take(lines[i], weight)
        for name in [d.name for d in self.symbols.enclosing(line)]:
            bare.pop(name, None)

        def capped(table: dict) -> dict:
            return {k: min(v, 4.0) for k, v in table.items()}

        return capped(bare), capped(attrs), capped(pairs)

    def topic_words(self) -> dict[str, float]:
        """Sub-words (snake/camel parts, singular) of the code near the cursor, by closeness."""
        topic: dict[str, float] = defaultdict(float)
        low = max(0, self.line - TOPIC_LINES)
        high = min(len(self.lines) - 1, self.line + TOPIC_LINES // 2)
        for i in range(low, high + 1):
            weight = 1.0 / (1.0 + abs(self.line - i) / 4.0)
            for word in set(identifiers(self.lines[i])):
                for part in subwords(word):
                    topic[part] += weight
        for d in self.symbols.enclosing(self.line):
            for part in subwords(d.name):
                topic[part] += 1.0
        return {k: min(v, 2.0) / 2.0 for k, v in topic.items()}

    def local_names(self, inner: Definition | None) -> set[str]:
        """Parameters and assigned names of the enclosing function: they shadow workspace names
        (`request` the argument is not `request` the function in api.py)."""
        if inner is None:
            return set()
        body = "\n".join(self.lines[inner.start_line : inner.end_line + 1])
        names = set(identifiers(inner.signature))
        names.update(m.group(1) for m in _ASSIGNED.finditer(body))
        return names - {inner.name}

    def add(self, rel: str, index: int, score: float) -> None:
        self.scores[(rel, index)] += score

    def defs_named(self, rel: str, name: str, follow: int = 2) -> list[tuple[str, int]]:
        """Top-level definitions of `name` in a file, following its own imports (re-exports)."""
        outline = self.outline(rel)
        if outline is None:
            return []
        found = [(rel, i) for i in self.named(rel, name)]
        top = [(r, i) for r, i in found if outline.definitions[i].parent < 0]
        if top or found:
            return top or found
        if follow <= 0:
            return []
        out: list[tuple[str, int]] = []
        for imp in outline.imports:
            if imp.alias == name or imp.name == "*":
                for target, target_name in self.index.resolve_import(rel, outline.language, imp):
                    if target_name is None or target == rel:
                        continue
                    wanted = name if target_name == "*" else target_name
                    out.extend(self.defs_named(target, wanted, follow - 1))
        return out

    def rank(self) -> list[Candidate]:
        inner = self.innermost()
        bare, attrs, pairs = self.usage_weights(inner)
        local = self.local_names(inner)
        index, rel, language = self.index, self.rel, self.symbols.language
        bound: dict[str, list[Import]] = defaultdict(list)
        star_files: list[str] = []
        module_files: dict[str, list[str]] = defaultdict(list)
        import_files: list[str] = []
        for imp in self.symbols.imports:
            targets = index.resolve_import(rel, language, imp)
            for target, name in targets:
                if target not in import_files:
                    import_files.append(target)
                if name == "*":
                    star_files.append(target)
                elif name is None and imp.alias:
                    module_files[imp.alias].append(target)
            if imp.alias and imp.name not in (None, "*"):
                bound[imp.alias].append(imp)
        # Go's package and Java's are the folder: its other files' top-level names are in
        # scope with no import, as a star import's would be.
        star_files += self.package_files()
        enclosing = self._enclosing_indices()
        python = language == "python"
        own_class = max(
            (i for i in enclosing if self.symbols.definitions[i].kind in self.spec.containers),
            default=-1,
        )

        # Symbol-table lookups are the costly part: only for the names most tied to the cursor.
        global_words = set(sorted(bare, key=lambda w: (-bare[w], w))[:MAX_GLOBAL_WORDS])
        global_attrs = set(sorted(attrs, key=lambda w: (-attrs[w], w))[:MAX_GLOBAL_WORDS])
        for word, weight in bare.items():
            if word in bound:
                for imp in bound[word]:
                    for target, name in index.resolve_import(rel, language, imp):
                        if name is None:
                            continue  # a module: its attributes come through `pairs`
                        for hit in self.defs_named(target, name):
                            self.add(*hit, weight * W_IMPORTED)
                continue
            found = False
            for i in self.named(rel, word):
                # Bare names reach top-level definitions (and, outside Python, own members).
                d = self.symbols.definitions[i]
                if i in enclosing:
                    continue
                if d.parent < 0 or (not python and d.parent == own_class):
                    self.add(rel, i, weight * W_SAME_FILE)
                    found = True
            for target in star_files:
                for hit in self.defs_named(target, word, follow=1):
                    self.add(*hit, weight * W_STAR)
                    found = True
            if found or word in module_files or word in local or word not in global_words:
                continue
            # Python imports every name it uses: a name not imported is a local or a builtin.
            trust = W_GLOBAL_PYTHON if python else W_GLOBAL
            self.global_lookup(word, weight * trust, members=False)

        for word, weight in attrs.items():
            hits = [
                i
                for i in self.named(rel, word)
                if own_class >= 0
                and self.symbols.definitions[i].parent == own_class
                and i not in enclosing
            ]
            for i in hits:
                self.add(rel, i, weight * W_SAME_FILE)
            if not hits and word in global_attrs:
                self.global_lookup(word, weight * W_ATTRIBUTE, members=True)

        for (base, attr), weight in pairs.items():
            for target in module_files.get(base, ()):
                for hit in self.defs_named(target, attr):
                    self.add(*hit, weight * W_IMPORTED)

        # Imported names not used yet are what the next line is likely to call; those whose
        # name speaks of what the code around the cursor talks about most of all.
        topic = self.topic_words()
        uses = self.import_uses(bound)
        unused = sum(1 for n in uses.values() if n == 0)
        unused_weight = W_UNUSED_IMPORT * min(1.0, UNUSED_IMPORTS_CLEAR / max(1, unused))
        for alias, imports in bound.items():
            parts = subwords(alias)
            related = sum(topic.get(p, 0.0) for p in parts) / max(1, len(parts))
            weight = W_IMPORT_BASELINE + W_TOPIC * min(related, 1.0)
            if uses.get(alias) == 0:
                weight += unused_weight
            for imp in imports:
                for target, name in index.resolve_import(rel, language, imp):
                    if name not in (None, "*"):
                        for hit in self.defs_named(target, name):
                            self.add(*hit, weight)

        # Modules the file uses (`cli.load_dotenv()`): their top-level names on the topic.
        for alias, files in module_files.items():
            if alias not in bare:
                continue
            for target in files[:4]:
                outline = self.outline(target)
                for i, d in enumerate(outline.definitions if outline else ()):
                    parts = subwords(d.name)
                    related = sum(topic.get(p, 0.0) for p in parts) / max(1, len(parts))
                    if d.parent < 0 and related > 0:
                        self.add(target, i, W_MODULE_TOPIC * min(related, 1.0))

        self.second_hop()
        self.recent()
        self.similar_windows(import_files)
        return self.collect()

    def package_files(self) -> list[str]:
        """The other files of the current file's folder, in a language whose package is its
        folder (FOLDER_PACKAGES); at most MAX_PACKAGE_FILES, nearest names first."""
        if self.symbols.language not in FOLDER_PACKAGES:
            return []
        folder = posixpath.dirname(self.rel)
        ext = posixpath.splitext(self.rel)[1]
        found = [
            r
            for r in self.index.files()
            if r != self.rel and posixpath.dirname(r) == folder and r.endswith(ext)
        ]
        return found[:MAX_PACKAGE_FILES]

    def import_uses(self, bound: Mapping[str, list[Import]]) -> dict[str, int]:
        """How often each imported name appears in the file besides its import. Names imported
        but not used yet were imported to be used: the code being written is their likeliest
        user. (A substring count: a name inside a longer one counts as a use.)"""
        text = "\n".join(self.lines)
        return {alias: max(0, text.count(alias) - 1) for alias in bound if len(alias) > 1}

    def global_lookup(self, word: str, weight: float, *, members: bool) -> None:
        """A name found only in the workspace symbol table: trusted if defined in few files."""
        limit = 2 if members else MAX_GLOBAL_FILES
        files = [r for r in self.index.files_defining(word) if r != self.rel]
        if not files or len(files) > 2 * limit:  # common names say too little (and cost much)
            return
        hits: dict[str, list[int]] = {}
        for r in files:
            outline = self.outline(r)
            found = [
                i
                for i in self.named(r, word)
                if outline and (outline.definitions[i].parent >= 0) == members
            ]
            if found:
                hits[r] = found
        if not 0 < len(hits) <= limit:
            return
        for r, found in hits.items():
            closeness = 1.0 + 0.1 * _shared_depth(r, self.rel)
            for i in found:
                self.add(r, i, weight * closeness / len(hits))

    def second_hop(self) -> None:
        """Names the best definitions use (their parameter and return types, helpers they call)
        matter too: resolve them in the definition's own file and its imports."""
        best = sorted(self.scores.items(), key=lambda kv: (-kv[1], kv[0]))[:SECOND_HOP_TOP]
        for (rel, i), score in best:
            outline = self.outline(rel)
            if outline is None or i >= len(outline.definitions):
                continue
            d = outline.definitions[i]
            signature_words = set(identifiers(d.signature))
            for word in d.idents:
                if word in self.spec.keywords:
                    continue
                hits = self.defs_named(rel, word, follow=1)
                if not hits or len(hits) > 3:
                    continue
                weight = (0.4 if word in signature_words else 0.15) * min(score, 2.0) / len(hits)
                for hit in hits:
                    if hit != (rel, i):
                        self.add(*hit, weight)

    def recent(self) -> None:
        """Definitions around the latest edits (the last entries are the most recent)."""
        for age, (path, edit_line) in enumerate(reversed(list(self.recent_edits)[-10:])):
            weight = W_RECENT * (0.7**age)
            rel = self.index.relpath(path)
            outline = self.outline(rel)
            if outline is None:
                continue
            inner = -1
            for i, d in enumerate(outline.definitions):
                if d.start_line <= edit_line <= d.end_line:
                    inner = i
            if inner >= 0 and not (rel == self.rel and inner in self._enclosing_indices()):
                self.add(rel, inner, weight)

    def _enclosing_indices(self) -> set[int]:
        return {
            i
            for i, d in enumerate(self.symbols.definitions)
            if d.start_line <= self.line <= d.end_line
        }

    def similar_windows(self, import_files: list[str]) -> None:
        """Copilot's neighbouring-tab signal: windows most like the lines above the cursor."""
        low = max(0, self.line - QUERY_LINES)
        query_text = (
            "\n".join(self.lines[low : self.line]) + "\n" + self.lines[self.line][: self.column]
        )
        query = set(identifiers(query_text)) - self.spec.keywords
        if len(query) < 2:
            return
        sources: list[str] = []
        for rel in [
            *sorted(self.open),
            *import_files,
            *(self.index.relpath(p) for p, _ in self.recent_edits),
        ]:
            if rel != self.rel and rel not in sources:
                sources.append(rel)
        for rel in sources[:MAX_WINDOW_FILES]:
            text = self.file_text(rel)
            if text is None:
                continue
            lines = split_lines(text)
            for score, window in best_windows(query, text, top=2):
                if score < 0.1:
                    continue
                self.windows.append(
                    Candidate(
                        path=rel,
                        definition=None,
                        def_index=-1,
                        start_line=window.start,
                        end_line=window.end,
                        score=score * W_WINDOW,
                        symbols=None,
                        text="".join(f"{x}\n" for x in lines[window.start : window.end + 1]),
                    )
                )

    def collect(self) -> list[Candidate]:
        # One chunk per name and file, with the best score of them: `@overload` stubs give way
        # to the implementation.
        chosen: dict[tuple[str, str], Candidate] = {}
        for (rel, i), score in self.scores.items():
            outline = self.outline(rel)
            if outline is None or i >= len(outline.definitions):
                continue
            d = outline.definitions[i]
            if rel in self.open and rel != self.rel:
                score *= OPEN_BUFFER_BOOST
            candidate = Candidate(rel, d, i, d.first_line, d.end_line, score, outline)
            other = chosen.get((rel, d.qualname))
            if other is not None:
                candidate.score = other.score = max(score, other.score)
            if other is None or _preferred(candidate, other):
                chosen[(rel, d.qualname)] = candidate
        out = [*chosen.values(), *self.windows]
        out.sort(key=lambda c: (-c.score, c.path, c.start_line, c.def_index))
        return out[:MAX_CANDIDATES]


_SUBWORD = re.compile(r"[A-Z]+(?=[A-Z][a-z])|[A-Z]?[a-z]+|[A-Z]+")
_COMMON = frozenset(
    {"get", "set", "the", "and", "for", "new", "init", "self", "none", "str", "int"}
)


@functools.lru_cache(maxsize=1 << 16)  # the same names come back on every request
def subwords(name: str) -> tuple[str, ...]:
    """`cookiejar_from_dict` -> [cookiejar, from, dict]; `HTTPAdapter` -> [http, adapter]."""
    out = []
    for part in _SUBWORD.findall(name):
        part = part.lower()
        if len(part) > 3 and part.endswith("s") and not part.endswith("ss"):
            part = part[:-1]
        if len(part) >= 3 and part not in _COMMON:
            out.append(part)
    return tuple(out)


def _is_overload(d: Definition) -> bool:
    return d.signature.startswith(("@overload", "@typing.overload", "@t.overload"))


def _preferred(a: Candidate, b: Candidate) -> bool:
    """Of two definitions with one name in one file: the implementation over an `@overload`
    stub, else the first (a property's getter before its setter)."""
    assert a.definition is not None and b.definition is not None
    stub_a, stub_b = _is_overload(a.definition), _is_overload(b.definition)
    if stub_a != stub_b:
        return stub_b
    return a.def_index < b.def_index


def _pairs(text: str) -> list[tuple[str, str]]:
    """`base.attr` / `base::attr` / `base->attr` pairs of a line of code."""
    return _PAIR.findall(text)


def _shared_depth(a: str, b: str) -> int:
    depth = 0
    for x, y in zip(a.split("/")[:-1], b.split("/")[:-1], strict=False):
        if x != y:
            break
        depth += 1
    return depth
