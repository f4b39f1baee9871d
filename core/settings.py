"""Settings: flywheel.toml, then FLYWHEEL_* environment variables (which win), via pydantic-settings."""

from __future__ import annotations

import os
from functools import lru_cache
from pathlib import Path
from typing import Any

from pydantic import Field, SecretStr
from pydantic_settings import BaseSettings, PydanticBaseSettingsSource, SettingsConfigDict, TomlConfigSettingsSource


def _toml_path() -> Path:
    return Path(os.environ.get("FLYWHEEL_CONFIG", "flywheel.toml"))


class Settings(BaseSettings):
    """Effective settings. Every field can be set in flywheel.toml or as FLYWHEEL_<NAME>."""

    model_config = SettingsConfigDict(env_prefix="FLYWHEEL_", extra="ignore")

    lake: str = "./lake"
    landing: str = "./landing"
    # S3 (used when the lake or landing area is s3://...)
    s3_endpoint_url: str | None = None
    s3_region: str = "us-east-1"
    s3_access_key_id: str | None = Field(default=None, repr=False)  # half of a credential: kept out of reprs and logs
    s3_secret_access_key: SecretStr | None = None
    s3_allow_http: bool = False
    # Bounds on a slow or unreachable endpoint (boto3 and deltalake alike): an error comes within seconds.
    s3_connect_timeout_s: float = 3.0
    s3_read_timeout_s: float = 20.0
    s3_max_attempts: int = 3  # total tries per request, the first included
    # pseudonymisation of annotator ids
    pseudonym_salt: SecretStr = SecretStr("flywheel-default-salt-change-me")
    # ASR and cleanup
    asr_model: str = "tiny.en"
    asr_device: str = "cpu"
    asr_compute_type: str = "int8"
    asr_language: str | None = "en"
    asr_beam_size: int = 1
    asr_languages: list[str] = ["en"]  # speech in other languages stays in the raw transcript, never a thought
    asr_lid_model: str | None = "base"  # multilingual Whisper that identifies unsure segments' language; None: off
    asr_lid_below: float = 0.75  # segments decoded with confidence below this get their language identified
    asr_multilingual_model: str | None = None  # e.g. "base": transcribes other-language segments in their language
    asr_low_confidence: float = 0.4  # segments below this confidence are flagged low_confidence, not thoughts
    asr_priming: bool = True  # the session's instruction, app and element names as Whisper's initial prompt
    cleanup_backend: str = "rules"  # rules | llm
    llm_model: str | None = None  # local model folder/GGUF, or an OpenAI-compatible URL
    # size limits of a think-aloud bundle, folder or archive alike: `flywheel upload` checks and ingestion enforce
    # the same values (ingest.archives.Limits), so a bundle that passes upload's checks passes ingestion's
    bundle_max_bytes: int = Field(default=8 << 30, ge=1)  # all files, unpacked
    bundle_max_file_bytes: int = Field(default=4 << 30, ge=1)  # one file, unpacked
    bundle_max_files: int = Field(default=20_000, ge=1)
    bundle_max_ratio: float = Field(default=200.0, gt=1)  # unpacked / packed beyond which a member is a bomb
    # limits on input JSON (every reader: rollout lines, annotation sessions, bundle manifests and events)
    json_max_depth: int = Field(default=64, ge=1)  # nesting of arrays/objects; the formats need under 10
    json_max_bytes: int = Field(default=256 << 20, ge=1)  # one document or one JSONL line
    # the workbench (flywheel workbench serve): the key that signs session cookies (a random one per start when
    # unset, so sessions end with the server) and the largest upload it accepts
    workbench_secret: SecretStr | None = None
    workbench_max_upload_mb: float = 512.0
    # routing
    routing_policy: str | None = None  # path to a routing policy file; the bundled default otherwise
    # training: torch.compile for the jobs whose config asks for it (training/compiled.py); false turns it off for
    # every job (a machine without a C++ compiler, or runs too short to pay the compile back, such as the tests)
    compile: bool = True

    @classmethod
    def settings_customise_sources(
        cls,
        settings_cls: type[BaseSettings],
        init_settings: PydanticBaseSettingsSource,
        env_settings: PydanticBaseSettingsSource,
        dotenv_settings: PydanticBaseSettingsSource,
        file_secret_settings: PydanticBaseSettingsSource,
    ) -> tuple[PydanticBaseSettingsSource, ...]:
        return (init_settings, env_settings, TomlConfigSettingsSource(settings_cls, toml_file=_toml_path()))

    def masked(self) -> dict[str, Any]:
        """Settings as a dict with secrets shown as '***' (for `flywheel config` and logs)."""
        out: dict[str, Any] = {}
        for k, v in self.model_dump().items():
            if isinstance(v, SecretStr):
                out[k] = "***" if v.get_secret_value() else ""
            elif k.endswith(("secret_access_key", "access_key_id", "salt")) and v:
                out[k] = "***"
            else:
                out[k] = v
        return out


@lru_cache(maxsize=1)
def _cached() -> Settings:
    return Settings()


def get_settings(**overrides: Any) -> Settings:
    """The effective settings; overrides (e.g. from CLI flags) win over everything."""
    if overrides:
        return Settings(**{k: v for k, v in overrides.items() if v is not None})
    return _cached()


def machine_cache(name: str) -> Path:
    """Where what was measured or built for this machine is kept (the training precision, torch.compile's kernels):
    `FLYWHEEL_CACHE_DIR`, else ~/.cache/flywheel. Not a setting: the cache outlives any one project's flywheel.toml."""
    return Path(os.environ.get("FLYWHEEL_CACHE_DIR") or Path.home() / ".cache" / "flywheel") / name


def reset_settings_cache() -> None:
    _cached.cache_clear()
