"""Where an import points inside the workspace: which file(s), and which name in them.

Resolution is by path suffix, so it works without knowing the project's source roots (src/
layouts, sdists unpacked in a subfolder, Go module paths, Java package folders).
"""

from __future__ import annotations

import posixpath
import re
import threading
from collections import defaultdict

from .symbols import Import

# (file relative path, name in it: None = the module itself, "*" = everything it defines)
Target = tuple[str, str | None]

_RUST_VERSION = re.compile(r"-\d+(\.\d+)*([-+.][\w.]+)?$")  # a registry folder's `-0.10.3`
_JS_EXTENSIONS = (".ts", ".tsx", ".js", ".jsx", ".mjs", ".cjs", ".d.ts")


class Resolver:
    def __init__(self, root_name: str = "") -> None:
        self.root_name = root_name  # the workspace folder's name: a crate's, at its root
        self._by_name: dict[str, set[str]] = defaultdict(set)
        self._cache: dict[tuple[str, str, str, str | None], tuple[Target, ...]] = {}
        self._lock = threading.Lock()

    def add(self, rel: str) -> None:
        with self._lock:
            names = self._by_name[posixpath.basename(rel)]
            if rel not in names:
                names.add(rel)
                self._cache.clear()

    def remove(self, rel: str) -> None:
        with self._lock:
            names = self._by_name.get(posixpath.basename(rel))
            if names and rel in names:
                names.discard(rel)
                self._cache.clear()

    def exists(self, rel: str) -> bool:
        return rel in self._by_name.get(posixpath.basename(rel), ())

    def resolve(self, from_rel: str, language: str, imp: Import) -> tuple[Target, ...]:
        key = (posixpath.dirname(from_rel), language, imp.module, imp.name)
        with self._lock:
            hit = self._cache.get(key)
        if hit is not None:
            return hit
        targets = tuple(self._resolve(from_rel, language, imp))
        with self._lock:
            self._cache[key] = targets
        return targets

    # -- per language ---------------------------------------------------------------------------
    def _resolve(self, from_rel: str, language: str, imp: Import) -> list[Target]:
        if language == "python":
            return self._python(from_rel, imp)
        if language in ("javascript", "typescript", "tsx"):
            return self._javascript(from_rel, imp)
        if language == "go":
            return self._go(from_rel, imp)
        if language == "rust":
            return self._rust(from_rel, imp)
        if language == "java":
            return self._java(from_rel, imp)
        if language in ("c", "cpp"):
            return self._include(from_rel, imp)
        return []

    def _python(self, from_rel: str, imp: Import) -> list[Target]:
        module, name = imp.module, imp.name
        dots = len(module) - len(module.lstrip("."))
        rest = module[dots:].replace(".", "/")
        if dots:
            base = posixpath.dirname(from_rel)
            for _ in range(dots - 1):
                base = posixpath.dirname(base)
            stem = posixpath.join(base, rest) if rest else base

            def find(path: str) -> list[str]:
                return [p for p in (f"{path}.py", f"{path}/__init__.py") if self.exists(p)]
        else:
            stem = rest

            def find(path: str) -> list[str]:
                return self._suffix(f"{path}.py", from_rel) or self._suffix(
                    f"{path}/__init__.py", from_rel
                )

        if name and name != "*":
            as_module = find(posixpath.join(stem, name) if stem else name)
            if as_module:
                return [(f, None) for f in as_module]
        if not stem:
            return []
        return [(f, name) for f in find(stem)]

    def _javascript(self, from_rel: str, imp: Import) -> list[Target]:
        spec = imp.module
        name = None if imp.name in (None, "default") else imp.name
        if spec.startswith("."):
            base = posixpath.normpath(posixpath.join(posixpath.dirname(from_rel), spec))
            candidates = [base] + [base + e for e in _JS_EXTENSIONS]
            candidates += [f"{base}/index{e}" for e in _JS_EXTENSIONS]
            # TypeScript sources import their compiled name: './x.js' means ./x.ts.
            stem, ext = posixpath.splitext(base)
            if ext in (".js", ".jsx", ".mjs"):
                candidates += [stem + e for e in (".ts", ".tsx", ".mts")]
            for path in candidates:
                if self.exists(path):
                    return [(path, name)]
            return []
        spec = spec.removeprefix("@/").removeprefix("~/")
        for ext in _JS_EXTENSIONS:
            found = self._suffix(spec + ext, from_rel)
            if found:
                return [(found[0], name)]
        return []

    def _go(self, from_rel: str, imp: Import) -> list[Target]:
        parts = imp.module.split("/")
        # The package is a folder: match as many trailing path components as the workspace has.
        for take in range(min(len(parts), 4), 0, -1):
            folder = "/".join(parts[-take:])
            files = self._in_folder(folder, ".go")
            if files:
                return [(f, None) for f in files[:24]]
        return []

    def _rust(self, from_rel: str, imp: Import) -> list[Target]:
        parts = imp.module.split("::")
        here = posixpath.dirname(from_rel)
        head = parts[0]
        if head == "crate":
            base = here
            while base and posixpath.basename(base) != "src":
                base = posixpath.dirname(base)
            base = base or here
            parts = parts[1:]
        elif head in ("self", "super"):
            base = here
            while parts and parts[0] == "super":
                base = posixpath.dirname(base)
                parts = parts[1:]
            if parts and parts[0] == "self":
                parts = parts[1:]
        else:
            base = ""
            own = self._own_crate_src(head, from_rel)
            if own is not None:  # `use itertools::x` in the itertools crate's tests/benches
                base, parts = own, parts[1:]
                head = "crate"
        stem = "/".join(parts)
        name = imp.name

        def find(path: str) -> list[str]:
            if base or not path:
                full = posixpath.join(base, path) if path else base
                local = [p for p in (f"{full}.rs", f"{full}/mod.rs") if self.exists(p)]
                if local or not path:
                    return local
            return self._suffix(f"{path}.rs", from_rel) or self._suffix(f"{path}/mod.rs", from_rel)

        if name and name != "*":
            as_module = find(posixpath.join(stem, name) if stem else name)
            if as_module:
                return [(f, None) for f in as_module]
        if stem:
            return [(f, name) for f in find(stem)]
        if head == "crate":  # `use crate::Name`: the crate root
            return [(f, name) for f in find("lib") or find("main")]
        return []

    def _own_crate_src(self, head: str, from_rel: str) -> str | None:
        """The `src` folder of the workspace crate named `head` (its tests, benches and
        examples name it as an outside crate would), by the crate folder's name as Cargo and
        its registry write it (`itertools`, `itertools-0.10.3`, `serde_json` for serde-json);
        None when no crate of the workspace has that name."""
        for lib in self._suffix("src/lib.rs", from_rel):
            crate = posixpath.basename(posixpath.dirname(posixpath.dirname(lib))) or self.root_name
            if _RUST_VERSION.sub("", crate).replace("-", "_") == head:
                return posixpath.dirname(lib)
        return None

    def _java(self, from_rel: str, imp: Import) -> list[Target]:
        path = imp.module.replace(".", "/")
        if imp.name == "*":
            return [(f, "*") for f in self._in_folder(path, ".java")[:24]]
        found = self._suffix(f"{path}/{imp.name}.java", from_rel)
        if found:
            return [(found[0], imp.name)]
        # static import: module is the class, name a member
        return [(f, imp.name) for f in self._suffix(f"{path}.java", from_rel)[:1]]

    def _include(self, from_rel: str, imp: Import) -> list[Target]:
        local = posixpath.normpath(posixpath.join(posixpath.dirname(from_rel), imp.module))
        if self.exists(local):
            return [(local, "*")]
        return [(f, "*") for f in self._suffix(imp.module, from_rel)[:1]]

    # -- lookups --------------------------------------------------------------------------------
    def _suffix(self, suffix: str, near: str) -> list[str]:
        """Files whose path ends with `suffix` (whole components), nearest to `near` first."""
        suffix = suffix.lstrip("/")
        with self._lock:
            names = list(self._by_name.get(posixpath.basename(suffix), ()))
        found = [p for p in names if p == suffix or p.endswith("/" + suffix)]
        if len(found) > 1:
            found.sort(key=lambda p: (-_shared_depth(p, near), len(p), p))
        return found

    def _in_folder(self, folder: str, ext: str) -> list[str]:
        folder = folder.strip("/")
        with self._lock:
            paths = [p for names in self._by_name.values() for p in names if p.endswith(ext)]
        return sorted(
            p for p in paths if (d := posixpath.dirname(p)) == folder or d.endswith("/" + folder)
        )


def _shared_depth(a: str, b: str) -> int:
    depth = 0
    for x, y in zip(a.split("/")[:-1], b.split("/")[:-1], strict=False):
        if x != y:
            break
        depth += 1
    return depth
