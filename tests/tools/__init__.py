"""Tools of the project that are not the product: the screenshot maker and the demo
release's authoring code (builder, prompt families, frozen-matrix scorer)."""
