"""The one resource every stage uses: the pipeline config and the storage it names."""

import os

import dagster as dg
from dagster_aws.s3 import S3Resource

from platform_assets.config import PipelineConfig, default_config_path, load_config
from platform_assets.storage import S3Settings, Storage
from platform_assets.training_launch.pipes_messages import WholeLineTempFileMessageReader


class PipelineResource(dg.ConfigurableResource):
    """Loads the pipeline YAML and opens the storage root it names (local directory or S3).

    S3 endpoint and credentials may come from dagster-aws's `S3Resource` (configurable in the UI and
    with `EnvVar`s); whatever it leaves unset falls back to the config file and the AWS environment.
    """

    config_path: str = default_config_path()
    s3: S3Resource | None = None

    def config(self) -> PipelineConfig:
        return load_config(self.config_path)

    def s3_settings(self, cfg: PipelineConfig | None = None) -> S3Settings:
        """The S3Resource's settings where given, else the config file's (and the AWS env's)."""
        base = (cfg or self.config()).s3_settings()
        if self.s3 is None:
            return base
        return S3Settings(
            endpoint_url=self.s3.endpoint_url or base.endpoint_url,
            region=self.s3.region_name or base.region,
            access_key=self.s3.aws_access_key_id,
            secret_key=self.s3.aws_secret_access_key,
            session_token=self.s3.aws_session_token,
            max_attempts=base.max_attempts,
        )

    def storage(self, cfg: PipelineConfig | None = None) -> Storage:
        cfg = cfg or self.config()
        return Storage(cfg.storage_root, self.s3_settings(cfg))


def default_pipeline_resource() -> PipelineResource:
    s3 = None
    if os.environ.get("AWS_ENDPOINT_URL") or os.environ.get("AWS_ACCESS_KEY_ID"):
        s3 = S3Resource(
            endpoint_url=os.environ.get("AWS_ENDPOINT_URL"),
            region_name=os.environ.get("AWS_REGION", "us-east-1"),
            aws_access_key_id=dg.EnvVar("AWS_ACCESS_KEY_ID") if os.environ.get("AWS_ACCESS_KEY_ID") else None,
            aws_secret_access_key=dg.EnvVar("AWS_SECRET_ACCESS_KEY")
            if os.environ.get("AWS_SECRET_ACCESS_KEY")
            else None,
        )
    return PipelineResource(config_path=default_config_path(), s3=s3)


@dg.definitions
def resources() -> dg.Definitions:
    return dg.Definitions(resources={"pipeline": default_pipeline_resource(),
                                     # messages read as whole lines (training_launch/pipes_messages.py)
                                     "pipes_subprocess_client": dg.PipesSubprocessClient(
                                         message_reader=WholeLineTempFileMessageReader())})
