"""The pipeline as library functions: checkpoint -> static model -> ONNX -> repository, one function per stage over a
named model, and `deploy` for a whole deployment file. The commands of ernie_deploy.cli parse their flags into the
typed options of pipeline.options and call these; `ernie-deploy apply` calls `deploy`.

    options.py   FetchOptions, ExportOptions, ConvertOptions (BuildOptions: repository.options); from_mapping
    locate.py    where a named model's artifacts are: its checkpoint, static model and ONNX model
    stages.py    fetch_model, export_model
    convert.py   convert_model: the parity, INT8 and FP16 gates and the calibration texts
    build.py     build_models: the runtime and layout chosen, each model's record read, the repository written
    deploy.py    plan and deploy: a deployment file through every stage, then one build
"""
