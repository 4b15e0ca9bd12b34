"""What the tests of cxlkv.vllm against a vLLM release's offloading classes
share (contract.py, one interpreter per release; test_v033.py, 0.33's
classes over the 0.32 runtime; test_spec.py): the spec's extra config for a
test region, and the check that each member cxlkv implements takes the
release's parameters. Imports nothing of vLLM: each test hands in the
release's classes."""
import inspect


def spec_extra(path, **kw):
    """kv_connector_extra_config selecting CxlkvOffloadingSpec on an 8 MiB
    region at `path` (no prefault, a fixed model fingerprint), plus `kw`."""
    return dict({"spec_name": "CxlkvOffloadingSpec", "spec_module_path": "cxlkv.vllm",
                 "region_path": path, "region_size": 8 << 20, "prefault": "none",
                 "model_fingerprint": "f" * 32}, **kw)


def check_members(ours, theirs, compare, release):
    """Every public member of the release's class `theirs` (and __init__) is
    implemented by `ours` in the same form: a property as a property, a
    classmethod as a classmethod, and a function or classmethod with the
    parameters `compare(ours_fn, theirs_fn, where)` accepts. Returns how many
    members were checked."""
    cls = ours.__name__
    assert not ours.__abstractmethods__, \
        f"{cls} misses {release}'s {set(ours.__abstractmethods__)}"
    checked = 0
    for name, member in vars(theirs).items():
        if name.startswith("_") and name != "__init__":
            continue
        mine = inspect.getattr_static(ours, name)
        if isinstance(member, property):
            assert isinstance(mine, property), f"{cls}.{name} must be a property, as in {release}"
        elif isinstance(member, classmethod):
            assert isinstance(mine, classmethod), \
                f"{cls}.{name} must be a classmethod, as in {release}"
            compare(getattr(ours, name), getattr(theirs, name), f"{cls}.{name}")
        elif inspect.isfunction(member):
            compare(getattr(ours, name), member, f"{cls}.{name}")
        else:
            continue
        checked += 1
    print(f"{cls}: {checked} members checked against {release}'s {theirs.__name__}")
    return checked
