"""The stage job: Kafka offset ranges → avro files + done files in the staging area.

``prepare`` (driver): roll committed ranges forward, delete crash leftovers, plan ranges.
``task`` (Spark executors): stage exactly one offset range and commit it.
``job``: the two together on a SparkContext (an RDD of ranges), returning a summary for Dagster to report.
"""
