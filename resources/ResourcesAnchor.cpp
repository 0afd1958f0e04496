// Anchor translation unit: the library exists to carry the Qt resources (trainscope.qrc).
