"""Build glue: lib/ is the package `topiclake`, plus the native kernels (C): record decoder, cleaner, Avro decoder."""

from setuptools import Extension, find_packages, setup

setup(
    # lake/jars holds only Delta's pom.xml (data, not code): named here so setuptools ships it
    packages=["topiclake"] + [f"topiclake.{name}" for name in find_packages("lib")] + ["topiclake.lake.jars"],
    package_dir={"topiclake": "lib"},
    package_data={"topiclake.lake": ["log4j2.properties"], "topiclake.lake.jars": ["pom.xml"],
                  "topiclake.console": ["templates/*.html", "static/*.css"]},
    ext_modules=[
        Extension(
            "topiclake.segments._native._decode",
            sources=["lib/segments/_native/decode.c"],
            extra_compile_args=["-O3"],
            optional=False,
        ),
        Extension(
            "topiclake.segments._native._compact",
            sources=["lib/segments/_native/compact.c"],
            extra_compile_args=["-O3"],
            optional=False,
        ),
        Extension(
            "topiclake.lake.typed._native._avro",
            sources=["lib/lake/typed/_native/avro.c"],
            extra_compile_args=["-O3"],
            optional=False,
        ),
    ],
)
