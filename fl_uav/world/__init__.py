"""The synthetic land-cover world the simulation flies over: the class map (generated or a
raster file), region shapes, the aerial camera renderer, the map-based labeler and geodesy
(ENU <-> WGS84). The bottom layer: imports only the base modules."""
