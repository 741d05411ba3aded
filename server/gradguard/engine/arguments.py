"""`argparse`: the options a training script declares, and the values it runs with.

Research scripts keep their configuration in an `ArgumentParser`: `--freeze_embed`
(`action="store_true"`) decides whether the embedding is frozen, `--epochs` how often the
loop runs.  `parser.parse_args()` and `parser.parse_args([])` give the values the script
runs with when started as it is (`python train.py`), the declared defaults, each exactly:
`store_true` is False, `store_false` True, an option without a default None.  An argument
list written out (`parse_args(["--g_loss_terms", "G_chamfer2", "--no_l1_loss"])`, a notebook's
or an ablation's) sets the options it names, when each is an option's full name taking one
value of a known type or a flag.  Whatever is not one of those is unknown, never a guess: a
string default that `type=` converts, a required or positional option, sub-commands, an
abbreviated option, `nargs`, `append`, `count`.
"""
from __future__ import annotations

from gradguard.engine.values import NONE, UNKNOWN, UNSEEN_ATTRS, Const, Obj, Ref, Tup, const

OPAQUE = "<opaque>"  # on a parser: an option it declares is not known (its namespace's attributes are unknown)
OPTION = "<option>"  # on a parser, before an option string: (dest, action, type, choices) as one constant
POSITIONALS = "<positionals>"  # on a parser: it declares a positional argument
FLAG_DEFAULTS = {"store_true": False, "store_false": True}
CONVERTERS = {"builtins.str": str, "builtins.int": int, "builtins.float": float}


class ArgumentParsers:
    def make_parser(self, st, node, kwargs=None):
        """`argparse.ArgumentParser(...)`: no options yet, or those of its `parents=[...]`, in order
        (argparse copies each parent's actions and defaults into the new parser)."""
        obj = Obj(("parser",) + self.region_id(node, "parser"), "argparser")
        attrs = {}
        parents = (kwargs or {}).get("parents")
        if parents is not None:
            items = self.exact_items(parents, st)
            if items is None:
                attrs[OPAQUE] = const(True)
            for item in items or ():
                if len(item) == 1 and isinstance(next(iter(item)), Obj) and next(iter(item)).kind == "argparser":
                    attrs.update(st.heap.get(next(iter(item)).id) or {})
                else:
                    attrs[OPAQUE] = const(True)
        st.heap[obj.id] = attrs
        return frozenset({obj})

    def parser_method(self, parser: Obj, name, args, kwargs, st, node):
        if name == "add_argument":
            self.add_option(parser, args, kwargs, st)
            return UNKNOWN  # an Action
        if name in ("add_argument_group", "add_mutually_exclusive_group"):
            return frozenset({parser})  # its options are the parser's
        if name == "set_defaults":
            for key, v in kwargs.items():
                st.set_attr(parser.id, key, v)
            return NONE
        if name in ("parse_args", "parse_known_args"):
            ns = self.parsed(parser, args, kwargs, st, node)
            return ns if name == "parse_args" else frozenset({Tup((ns, UNKNOWN))})
        if name == "add_subparsers":
            st.set_attr(parser.id, OPAQUE, const(True))
        return self.call_unknown(args, kwargs, st, node)

    def add_option(self, parser: Obj, args, kwargs, st):
        """`add_argument("--lr", type=float, default=0.1)`: its destination gets its default."""
        names = [a.value for v in args for a in v if isinstance(a, Const) and isinstance(a.value, str)]
        dest = kwargs.get("dest")
        if dest is not None:
            dest = next((a.value for a in dest if isinstance(a, Const) and isinstance(a.value, str)), None)
        elif len(names) == len(args) and names:
            longs = [n for n in names if n.startswith("--")]
            first = longs[0] if longs else names[0]
            dest = first.lstrip("-").replace("-", "_") if first.startswith("-") else first
        if dest is None:
            st.set_attr(parser.id, OPAQUE, const(True))
            return
        st.set_attr(parser.id, dest, self.option_default(names, kwargs))
        if names and not names[0].startswith("-"):
            st.set_attr(parser.id, POSITIONALS, const(True))
        kind = next((a.dotted for a in kwargs.get("type", frozenset({Ref("builtins.str")})) if isinstance(a, Ref)), None)
        choices = self.exact_items(kwargs["choices"], st) if "choices" in kwargs else ()
        choices = None if choices is None or not all(isinstance(_literal(c), (str, int, float)) for c in choices) \
            else tuple(_literal(c) for c in choices)
        plain = not kwargs.keys() & {"nargs", "const"} and len(kwargs.get("type", ())) <= 1
        spec = (dest, _literal(kwargs.get("action", const("store"))), kind if plain else None, choices)
        for name in names if len(names) == len(args) else ():
            st.set_attr(parser.id, OPTION + name, const(spec))

    def option_default(self, names, kwargs):
        """The value an option has when the command line does not give it."""
        positional = bool(names) and not names[0].startswith("-")
        if _literal(kwargs.get("required", const(False))) is not False or \
                positional and _literal(kwargs.get("nargs", NONE)) not in ("?", "*"):
            return UNKNOWN  # the command line must give it
        if "default" in kwargs:
            default = kwargs["default"]
            if "type" in kwargs and kwargs["type"] != frozenset({Ref("builtins.str")}) and \
                    any(isinstance(a, Const) and isinstance(a.value, str) for a in default):
                return UNKNOWN  # argparse converts a string default with `type` (`str` leaves it)
            return default
        action = _literal(kwargs.get("action", const("store")))
        if action in FLAG_DEFAULTS:
            return const(FLAG_DEFAULTS[action])
        return NONE if isinstance(action, str) else UNKNOWN

    def parsed(self, parser: Obj, args, kwargs, st, node):
        """The namespace `parse_args(argv)` returns: the defaults without `argv` or for `[]`,
        those with what a written-out `argv` sets, else unknown."""
        argv = args[0] if args else kwargs.get("args")
        tokens = () if argv is None else self.exact_items(argv, st) if len(argv) == 1 else None
        words = None if tokens is None else [_literal(t) for t in tokens]
        given = {k: v for k, v in (st.heap.get(parser.id) or {}).items() if not k.startswith(OPTION)}
        opaque = given.pop(OPAQUE, None) is not None
        positionals = given.pop(POSITIONALS, None) is not None
        obj = Obj(("obj",) + self.region_id(node, "args"), "instance")
        values = None if opaque or words is None or not all(isinstance(w, str) for w in words) or (
            positionals and words) else _parse(words, st.heap.get(parser.id) or {})
        attrs = {key: UNKNOWN for key in given} if values is None else {**given, **values}
        if values is None:
            attrs[UNSEEN_ATTRS] = const(True)
        st.heap[obj.id] = attrs
        return frozenset({obj})


def _parse(words: list, declared: dict) -> dict | None:
    """dest -> value for the options a command line sets (argparse's rules, where it is sure),
    None when any word is not an option's full name with its value (an abbreviation, a
    positional, a value of a type not known, `-h`)."""
    out = {}
    words = list(words)
    while words:
        word = words.pop(0)
        name, eq, value = word.partition("=") if word.startswith("--") else (word, "", "")
        spec = _literal(declared.get(OPTION + name, UNKNOWN))
        if not isinstance(spec, tuple):
            return None
        dest, action, kind, choices = spec
        if action in FLAG_DEFAULTS and not eq:
            out[dest] = const(not FLAG_DEFAULTS[action])
            continue
        if action != "store" or kind not in CONVERTERS:
            return None
        if not eq:
            if not words or words[0].startswith("-") and not _number(words[0]):
                return None
            value = words.pop(0)
        try:
            converted = CONVERTERS[kind](value)
        except ValueError:
            return None  # argparse exits
        if choices is None or choices and converted not in choices:
            return None
        out[dest] = const(converted)
    return out


def _number(word: str) -> bool:
    """`-1`, `-0.5`: a value (argparse takes a negative number for one when no option looks like it)."""
    try:
        float(word)
    except ValueError:
        return False
    return True


def _literal(v):
    """The one literal `v` surely is, else the `UNKNOWN` value itself (equal to no literal)."""
    return next(iter(v)).value if len(v) == 1 and isinstance(next(iter(v)), Const) else UNKNOWN
