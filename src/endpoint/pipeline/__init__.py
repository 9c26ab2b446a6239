"""Spark pipelines over the archive: the ``endpoint-archive`` data source and its helpers.

- :func:`local_session` / :func:`register`: a SparkSession with the source known.
- ``spark.read`` / ``spark.readStream`` ``.format("endpoint-archive").load(archive_dir)``:
  recorded messages as rows (:mod:`endpoint.pipeline.source`).
- ``df.write`` / ``df.writeStream`` ``.format("endpoint-archive")``: publish a
  ``payload`` column to a channel (:mod:`endpoint.pipeline.writer`).
- :mod:`endpoint.pipeline.frames`: the numpy frame decoder underneath.

Needs the ``pyspark``, ``pyarrow`` and ``numpy`` packages.
"""

from endpoint.pipeline.options import PipelineOptionError, ReaderOptions, WriterOptions
from endpoint.pipeline.session import local_session, register
from endpoint.pipeline.source import SOURCE_NAME, ArchiveDataSource, ArchiveStreamReader

__all__ = [
    "SOURCE_NAME",
    "ArchiveDataSource",
    "ArchiveStreamReader",
    "PipelineOptionError",
    "ReaderOptions",
    "WriterOptions",
    "local_session",
    "register",
]
