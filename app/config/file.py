"""The `genai.yaml` configuration file: a pydantic-settings source ranked below the environment.

Its keys are Settings field names, nested as Settings nests them, so a field added to Settings is
configurable here with no loader code. The file is checked whole before anything starts, and
every problem is one line naming the file and the key path:

- a key Settings does not have (a typo is never ignored; the closest known key is suggested);
- a value that does not validate;
- a secret written literally: a secret field `X` is written `X_env: VARIABLE`, the name of the
  environment variable that holds it, and that variable must be set;
- a key only the environment or the command line may set (say GENAI_MODEL).
"""

from __future__ import annotations

import difflib
import functools
import types
import typing
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import yaml
from pydantic import BaseModel, SecretStr, ValidationError
from pydantic.fields import FieldInfo
from pydantic_settings import BaseSettings, PydanticBaseSettingsSource

from app.errors import ConfigurationProblems

ENV_REFERENCE_SUFFIX = "_env"
"""`api_key_env: MY_KEY` reads the secret `api_key` from the environment variable MY_KEY."""

Problems = list[tuple[str, str]]
_LIST_AT_MOST = 15  # an unknown key's line lists the keys known beside it up to this many
EnvLookup = Callable[[str], str | None]


class _StrictLoader(yaml.SafeLoader):
    """safe_load, except that a key written twice is an error instead of the last one winning."""


def _no_duplicate_keys(loader: _StrictLoader, node: yaml.MappingNode) -> dict[Any, Any]:
    seen: set[Any] = set()
    for key_node, _ in node.value:
        key = loader.construct_object(key_node)
        if key in seen:
            raise yaml.constructor.ConstructorError(
                None, None, f"the key {key!r} is written twice", key_node.start_mark
            )
        seen.add(key)
    return loader.construct_mapping(node)


_StrictLoader.add_constructor(yaml.resolver.BaseResolver.DEFAULT_MAPPING_TAG, _no_duplicate_keys)


def _unwrap(annotation: Any) -> list[Any]:
    """The types an annotation allows: `X | None` → [X], `Annotated[X, …]` → [X]."""
    origin = typing.get_origin(annotation)
    if origin is typing.Annotated:
        return _unwrap(typing.get_args(annotation)[0])
    if origin is typing.Union or origin is types.UnionType:
        return [t for arg in typing.get_args(annotation) for t in _unwrap(arg)]
    return [] if annotation is type(None) else [annotation]


def _model_of(annotation: Any) -> type[BaseModel] | None:
    for option in _unwrap(annotation):
        if isinstance(option, type) and issubclass(option, BaseModel):
            return option
    return None


def _mapping_value_of(annotation: Any) -> Any | None:
    """For `dict[str, X]` (optionally `| None`): X; else None."""
    for option in _unwrap(annotation):
        if typing.get_origin(option) is dict:
            return typing.get_args(option)[1]
    return None


def _is_secret(field: FieldInfo) -> bool:
    return SecretStr in _unwrap(field.annotation)


def _dotted(where: tuple[str, ...]) -> str:
    return ".".join(where)


class _Reader:
    """Walks the file against the Settings model: checks keys, resolves secret references."""

    def __init__(self, env: EnvLookup, env_only: Mapping[str, str]) -> None:
        self._env = env
        self._env_only = env_only
        self.problems: Problems = []

    def problem(self, where: tuple[str, ...], text: str) -> None:
        self.problems.append((_dotted(where), text))

    def value(self, value: Any, annotation: Any, where: tuple[str, ...]) -> Any:
        model = _model_of(annotation)
        if model is not None and isinstance(value, dict):
            return self.model(value, model, where)
        item_type = _mapping_value_of(annotation)
        if item_type is not None and isinstance(value, dict):
            return {
                key: self.value(item, item_type, (*where, str(key))) for key, item in value.items()
            }
        return value  # validation reports a wrong type

    def model(
        self, data: Mapping[Any, Any], model: type[BaseModel], where: tuple[str, ...]
    ) -> dict[str, Any]:
        fields = model.model_fields
        secrets = {name for name, field in fields.items() if _is_secret(field)}
        known = sorted([*fields, *(f"{name}{ENV_REFERENCE_SUFFIX}" for name in secrets)])
        out: dict[str, Any] = {}
        for key, item in data.items():
            path = (*where, str(key))
            if not where and key in self._env_only:
                self.problem(path, self._env_only[key])
            elif key in secrets:
                self.problem(
                    path,
                    "a secret is never written in the config file: write "
                    f"`{key}{ENV_REFERENCE_SUFFIX}: VARIABLE`, the environment variable holding it",
                )
            elif (
                isinstance(key, str)
                and key.endswith(ENV_REFERENCE_SUFFIX)
                and (key.removesuffix(ENV_REFERENCE_SUFFIX) in secrets)
            ):
                secret = self.secret(item, path)
                if secret is not None:
                    out[key.removesuffix(ENV_REFERENCE_SUFFIX)] = secret
            elif key not in fields:
                close = difflib.get_close_matches(str(key), known, n=1)
                hint = f" (did you mean {close[0]!r}?)" if close else ""
                listed = f"; known here: {', '.join(known)}" if len(known) <= _LIST_AT_MOST else ""
                self.problem(path, f"unknown key{hint}{listed}")
            else:
                out[key] = self.value(item, fields[key].annotation, path)
        return out

    def secret(self, variable: Any, where: tuple[str, ...]) -> str | None:
        if not isinstance(variable, str) or not variable.strip():
            self.problem(where, "must name an environment variable, e.g. MY_OPENAI_KEY")
            return None
        value = self._env(variable.strip())
        if not value:
            self.problem(where, f"the environment variable {variable.strip()} is not set")
            return None
        return value


@functools.cache
def _file_only(settings_cls: type[BaseSettings]) -> type[BaseSettings]:
    """The Settings class reading nothing but its arguments: validates the file on its own, so
    a problem is named by its key path in the file, not by whichever source it was merged with."""

    class FileOnly(settings_cls):  # type: ignore[misc,valid-type]  # a subclass made at run time
        @classmethod
        def settings_customise_sources(
            cls,
            settings_cls: type[BaseSettings],
            init_settings: PydanticBaseSettingsSource,
            env_settings: PydanticBaseSettingsSource,
            dotenv_settings: PydanticBaseSettingsSource,
            file_secret_settings: PydanticBaseSettingsSource,
        ) -> tuple[PydanticBaseSettingsSource, ...]:
            return (init_settings,)

    return FileOnly


def _parse(path: Path) -> Any:
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise ConfigurationProblems([(str(path), "no such file (named by GENAI_CONFIG)")]) from None
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigurationProblems([(str(path), f"cannot be read: {exc}")]) from None
    try:
        return yaml.load(text, Loader=_StrictLoader)  # noqa: S506  # a SafeLoader subclass
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        where = f"line {mark.line + 1}, column {mark.column + 1}" if mark else "YAML"
        raise ConfigurationProblems(
            [(str(path), f"{where}: not valid YAML: {exc.problem or exc.context}")]
        ) from None
    except yaml.YAMLError as exc:
        raise ConfigurationProblems([(str(path), f"not valid YAML: {exc}")]) from None


def read_config_file(
    path: Path,
    settings_cls: type[BaseSettings],
    *,
    env: EnvLookup,
    env_only: Mapping[str, str],
) -> dict[str, Any]:
    """The file's settings, secrets resolved, checked whole; ConfigurationProblems otherwise.

    `env_only` maps the top-level keys the file may not set to the reason given for each.
    """
    data = _parse(path)
    if data is None:  # an empty file (or only comments) sets nothing
        return {}
    if not isinstance(data, dict):
        raise ConfigurationProblems(
            [(str(path), "the top level must be a mapping of settings, e.g. `default_model: …`")]
        )
    reader = _Reader(env, env_only)
    resolved = reader.model(data, settings_cls, ())
    problems = reader.problems
    try:
        _file_only(settings_cls)(**resolved)
    except ValidationError as exc:
        for error in exc.errors(include_url=False, include_input=False):
            problems.append((_dotted(tuple(map(str, error["loc"]))), error["msg"]))
    if problems:
        raise ConfigurationProblems([(f"{path}: {where}", text) for where, text in problems])
    return _without_env_overrides(resolved, settings_cls)


def _without_env_overrides(
    resolved: dict[str, Any], settings_cls: type[BaseSettings]
) -> dict[str, Any]:
    """A provider group reads its own variables (OPENAI_API_KEY…); the file must not hide them.

    Such a group is a BaseSettings of its own that takes its arguments over its variables, so
    the values its variables set are dropped from the file's: the environment wins, as always.
    """
    out = dict(resolved)
    for name, value in resolved.items():
        group = _model_of(settings_cls.model_fields[name].annotation)
        if group is not None and issubclass(group, BaseSettings) and isinstance(value, dict):
            from_env = group().model_fields_set
            out[name] = {key: item for key, item in value.items() if key not in from_env}
    return out


class ConfigFileSource(PydanticBaseSettingsSource):
    """Settings from the file the `path_field` setting names (GENAI_CONFIG); none when unset.

    Placed below init arguments, the environment and `.env`, so each of those overrides it.
    """

    def __init__(
        self,
        settings_cls: type[BaseSettings],
        *,
        path_field: str,
        env: EnvLookup,
        env_only: Mapping[str, str],
    ) -> None:
        super().__init__(settings_cls)
        self._path_field = path_field
        self._env = env
        self._env_only = env_only

    def get_field_value(self, field: FieldInfo, field_name: str) -> tuple[Any, str, bool]:
        return None, field_name, False  # unused: __call__ reads the whole file at once

    def __call__(self) -> dict[str, Any]:
        named = self.current_state.get(self._path_field)  # from init, environment or .env
        if not named:
            return {}
        return read_config_file(
            Path(named), self.settings_cls, env=self._env, env_only=self._env_only
        )
