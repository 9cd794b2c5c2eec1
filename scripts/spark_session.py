"""Starts and stops a local Spark session with Delta Lake once, so that `configure_spark_with_delta_pip`
fetches the delta-spark jars (from Maven Central, into ~/.ivy2) before the tests need them.

Run by scripts/setup.sh; tests/python/test_spark.py starts its session the same way.
"""

import os
import sys
import time


def main() -> int:
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    from delta import configure_spark_with_delta_pip
    from pyspark.sql import SparkSession

    start = time.monotonic()
    builder = (
        SparkSession.builder.master("local[1]")
        .appName("timelake-setup")
        .config("spark.sql.extensions", "io.delta.sql.DeltaSparkSessionExtension")
        .config("spark.sql.catalog.spark_catalog", "org.apache.spark.sql.delta.catalog.DeltaCatalog")
        .config("spark.driver.bindAddress", "127.0.0.1")
        .config("spark.driver.host", "127.0.0.1")
        .config("spark.ui.enabled", "false")
    )
    spark = configure_spark_with_delta_pip(builder).getOrCreate()
    spark.sparkContext.setLogLevel("ERROR")
    version = spark.version
    spark.stop()
    print(f"Spark {version} with Delta ready ({time.monotonic() - start:.0f} s)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
