"""A local Spark session with Delta Lake, as timelake's tests use it.

`delta_session()` is what tests/python/test_spark.py starts (once per test run). Run as a script
(scripts/setup.sh does), it starts and stops one session so that `configure_spark_with_delta_pip`
fetches the delta-spark jars (from Maven Central, into ~/.ivy2) before the tests need them.
"""

import os
import sys
import time


def delta_session(app_name: str = "timelake", cores: int = 2):
    """A Spark session bound to 127.0.0.1, with Delta's SQL extension and catalog, in UTC."""
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    from delta import configure_spark_with_delta_pip
    from pyspark.sql import SparkSession

    builder = (
        SparkSession.builder.master(f"local[{cores}]")
        .appName(app_name)
        .config("spark.sql.extensions", "io.delta.sql.DeltaSparkSessionExtension")
        .config("spark.sql.catalog.spark_catalog", "org.apache.spark.sql.delta.catalog.DeltaCatalog")
        .config("spark.driver.bindAddress", "127.0.0.1")
        .config("spark.driver.host", "127.0.0.1")
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.sql.session.timeZone", "UTC")
        .config("spark.sql.shuffle.partitions", str(cores))
        .config("spark.default.parallelism", str(cores))
        # Tables Spark creates have no deletion vectors unless asked for.
        .config("spark.databricks.delta.properties.defaults.enableDeletionVectors", "false")
    )
    session = configure_spark_with_delta_pip(builder).getOrCreate()
    session.sparkContext.setLogLevel("ERROR")
    return session


def main() -> int:
    start = time.monotonic()
    spark = delta_session("timelake-setup", cores=1)
    version = spark.version
    spark.stop()
    print(f"Spark {version} with Delta ready ({time.monotonic() - start:.0f} s)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
