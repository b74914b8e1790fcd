"""What a drone sends and the station reads: quantizers (QSGD, range, 2CEOAFL's, LGC's
layered top-k), the bit-exact wire codec (docs/wire_format.md), Ed25519 frame signing, and
``compression.*`` (config.py builds a drone's compressor). ROS-free; imports only
fl_uav.aggregation (the metadata keys a frame carries) and the base modules."""
